import sys, time, torch
import autosage_cli.torch as at
torch.set_num_threads(1)
N = 8
ei = torch.randint(0, N, (2, 20), generator=torch.Generator().manual_seed(0))
g = at.Graph.from_edge_index(ei, N)
torch.manual_seed(0)
layers = torch.nn.ModuleList([at.SAGEConv(32, 16, act="relu"), at.SAGEConv(16, 16, act="relu"), at.SAGEConv(16, 4)])
opt = torch.optim.Adam(layers.parameters())
x = torch.randn(N, 32)
def step():
    opt.zero_grad(set_to_none=True)
    h = x
    for l in layers:
        h = l(h, g)
    h.sum().backward()
for _ in range(200): step()
res = []
for r in range(9):
    t0 = time.perf_counter()
    for _ in range(500): step()
    res.append((time.perf_counter() - t0) / 500 * 1e6)
print(sys.argv[1], "us/step %.1f" % sorted(res)[4])
