"""torch_ref.py OUTDIR: independent references for tests/optim/test_optim_torch.c.

Writes, for each optimizer, OUTDIR/<name>.bin with deterministic inputs and
torch's results after `steps` updates, and OUTDIR/cosine.bin with the lrs of
torch.optim.lr_scheduler.CosineAnnealingLR. Layout (little-endian):

  <name>.bin  int64 n_decay, n_nodecay, steps, nstate
              float64 beta1, beta2, eps, weight_decay
              float64 lr[steps]
              float32 w0[n]  g[steps][n]  w[n]  state[nstate][n]   (n = n_decay + n_nodecay;
              the first n_decay elements decay, the rest do not)
  cosine.bin  int64 t_max, count; float64 base_lr, eta_min, lr[count]
              (lr[k] after k scheduler steps)

AdamW is torch.optim.AdamW itself (two param groups: weight_decay and 0).
Lion is written here from Chen et al. 2023, Program 1:
  update = interp(g, m, beta1).sign(); m = interp(g, m, beta2);
  w = w - lr * (update + w * wd),  interp(x, y, c) = (1 - c) * x + c * y.
Without torch: exit 77 (ctest: skipped), or 1 in CI (tests/oracle.py).
"""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import oracle  # noqa: E402

torch = oracle.need_module("torch", "python3-torch")

N_DECAY, N_NODECAY, STEPS = 300, 57, 10


def inputs(seed):
    gen = torch.Generator().manual_seed(seed)
    n = N_DECAY + N_NODECAY
    w0 = torch.randn(n, generator=gen, dtype=torch.float32)
    # Gradients of mixed scale, as a real network's, so eps matters somewhere.
    scale = torch.logspace(-4, 0, n, dtype=torch.float32)
    g = torch.randn(STEPS, n, generator=gen, dtype=torch.float32) * scale
    lrs = [1e-3 * (0.5 + 0.05 * t) for t in range(STEPS)]  # the lr changes every step
    return w0, g, lrs


def write(path, hyper, lrs, w0, g, w, states):
    with open(path, "wb") as f:
        f.write(struct.pack("<4q", N_DECAY, N_NODECAY, STEPS, len(states)))
        f.write(struct.pack("<4d", *hyper))
        f.write(struct.pack("<%dd" % len(lrs), *lrs))
        for t in [w0, g, w] + states:
            f.write(t.contiguous().numpy().astype("<f4").tobytes())


def adamw(out):
    b1, b2, eps, wd = 0.9, 0.95, 1e-8, 0.1
    w0, g, lrs = inputs(1)
    pd = torch.nn.Parameter(w0[:N_DECAY].clone())
    pn = torch.nn.Parameter(w0[N_DECAY:].clone())
    opt = torch.optim.AdamW([{"params": [pd], "weight_decay": wd}, {"params": [pn], "weight_decay": 0.0}],
                            lr=lrs[0], betas=(b1, b2), eps=eps)
    for t in range(STEPS):
        for grp in opt.param_groups:
            grp["lr"] = lrs[t]
        pd.grad = g[t, :N_DECAY].clone()
        pn.grad = g[t, N_DECAY:].clone()
        opt.step()
    m = torch.cat([opt.state[pd]["exp_avg"], opt.state[pn]["exp_avg"]])
    v = torch.cat([opt.state[pd]["exp_avg_sq"], opt.state[pn]["exp_avg_sq"]])
    w = torch.cat([pd.detach(), pn.detach()])
    write(os.path.join(out, "adamw.bin"), (b1, b2, eps, wd), lrs, w0, g, w, [m, v])


def lion(out):
    b1, b2, wd = 0.9, 0.99, 0.3
    w0, g, lrs = inputs(2)
    w = w0.clone()
    m = torch.zeros_like(w)
    wdv = torch.cat([torch.full((N_DECAY,), wd), torch.zeros(N_NODECAY)])
    for t in range(STEPS):
        update = ((1 - b1) * g[t] + b1 * m).sign()
        m = (1 - b2) * g[t] + b2 * m
        w = w - lrs[t] * (update + w * wdv)
    write(os.path.join(out, "lion.bin"), (b1, b2, 0.0, wd), lrs, w0, g, w, [m])


def cosine(out):
    t_max, base, eta_min = 100, 3e-4, 3e-5
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=base)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=t_max, eta_min=eta_min)
    lrs = []
    for _ in range(t_max + 1):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    with open(os.path.join(out, "cosine.bin"), "wb") as f:
        f.write(struct.pack("<2q", t_max, len(lrs)))
        f.write(struct.pack("<%dd" % (2 + len(lrs)), base, eta_min, *lrs))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    adamw(out)
    lion(out)
    cosine(out)
    print("wrote", out, "with torch", torch.__version__)


if __name__ == "__main__":
    main()
