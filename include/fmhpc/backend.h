/* backend.h: placeholder, replaced by the backend op table. */
#ifndef FMHPC_BACKEND_H
#define FMHPC_BACKEND_H
#endif
