/* json.h: a strict JSON reader (RFC 8259) into a tree held in one arena, and
 * string escaping for writers. Used for tokenizer.json, JSONL records,
 * safetensors headers, config.json and .bin manifests: all untrusted input, so
 * every error has a line, column and reason, and nothing is guessed (no
 * trailing commas, no comments, no invalid UTF-8, no lone surrogates). Also
 * the streaming JSONL line reader (plain, gzip, zstd; src/core/jsonl.c) that
 * prep, dedup, tokenizer training and IFD share. */
#ifndef FMHPC_JSON_H
#define FMHPC_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum { FM_JSON_NULL, FM_JSON_BOOL, FM_JSON_NUM, FM_JSON_STR, FM_JSON_ARR, FM_JSON_OBJ } FmJsonType;

typedef struct FmJson FmJson;
struct FmJson {
  FmJsonType type;
  bool b;
  bool is_int;  /* a number written without fraction or exponent that fits int64 */
  int64_t i;    /* its exact value */
  double num;   /* every number, as strtod reads it */
  const char *s; /* string (NUL-terminated; may hold NULs: use len) */
  size_t len;
  int64_t n;           /* array items / object members */
  FmJson *items;       /* array items, or object values */
  const char **keys;   /* object keys, in document order */
  size_t *keylens;
};

typedef struct FmJsonDoc {
  FmJson root;
  void *arena;
} FmJsonDoc;

typedef struct FmJsonError {
  int64_t offset;
  int line, col;
  char msg[128];
} FmJsonError;

/* Parse text[0..len) (all of it: trailing garbage is an error). max_depth
 * bounds nesting (untrusted input); 0 means 256. */
int fm_json_parse(FmJsonDoc *doc, const char *text, size_t len, int max_depth, FmJsonError *err);
void fm_json_free(FmJsonDoc *doc);

/* Object member by key (first match), or NULL. */
const FmJson *fm_json_get(const FmJson *obj, const char *key);
const char *fm_json_type_name(FmJsonType t);

/* Write s[0..n) as a JSON string literal with quotes and escapes; a byte
 * that starts no whole UTF-8 character is written as \ufffd (JSON is UTF-8). */
void fm_json_write_str(FILE *out, const char *s, size_t n);

/* Validate UTF-8 (no overlongs, no surrogates, <= U+10FFFF); returns the byte
 * offset of the first bad byte, or -1 when valid. */
int64_t fm_utf8_check(const char *s, size_t n);

/* ---- streaming JSONL over plain, gzip and zstd files ------------------- */
/* The compression is found from the file's magic bytes. Lines are returned
 * without the newline; line numbers count every line of the decompressed
 * text from 1. The SHA-256 of the raw (compressed) bytes is available once
 * the whole file has been read. */
typedef struct FmJsonl FmJsonl;
int fm_jsonl_open(FmJsonl **r, const char *path, FILE *err);
/* 1: a line in *line (NUL-terminated, valid until the next call), 0: end of
 * file, <0: a read or decompression error (reported to err with the file). */
int fm_jsonl_next(FmJsonl *r, const char **line, size_t *len, int64_t *lineno);
int64_t fm_jsonl_raw_bytes(const FmJsonl *r); /* raw bytes consumed so far */
const char *fm_jsonl_codec(const FmJsonl *r); /* "plain", "gzip" or "zstd" */
/* SHA-256 hex of the raw file, after fm_jsonl_next returned 0; else NULL. */
const char *fm_jsonl_sha256(const FmJsonl *r);
/* No SHA-256 from here on (fm_jsonl_sha256 then stays NULL): for readers whose
 * checksum another rank makes. */
void fm_jsonl_no_sha256(FmJsonl *r);
void fm_jsonl_close(FmJsonl *r);

#endif
