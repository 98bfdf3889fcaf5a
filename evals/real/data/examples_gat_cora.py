"""pytorch/examples' gat/main.py downloads the Cora citation graph (cora.tgz) into ./cora unless
cora.content and cora.cites are already there. We write a synthetic graph of Cora's size (2708
papers, 5429 citations: main.py splits the nodes by fixed index ranges) in the same two files:
`<paper id> <1433 binary word features> <class label>` per line, and `<cited id> <citing id>` edges,
with labels that follow the features and the edges so there is something to learn, and no paper
without an edge (GAT's masked softmax over a node with no neighbour is NaN)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

rng = np.random.default_rng(7)
n, f, classes = 2708, 1433, ["Case_Based", "Genetic_Algorithms", "Neural_Networks", "Theory"]
label = rng.integers(0, len(classes), n)
ids = rng.choice(np.arange(1000, 100000), n, replace=False)
centres = rng.random((len(classes), f)) < 0.02
feats = (rng.random((n, f)) < 0.01) | (centres[label] & (rng.random((n, f)) < 0.6))
here = Path("gat/cora")
here.mkdir(parents=True, exist_ok=True)
with (here / "cora.content").open("w") as fh:
    for i in range(n):
        fh.write(f"{ids[i]}\t" + "\t".join("1" if v else "0" for v in feats[i]) + f"\t{classes[label[i]]}\n")
edges = set()
for i in range(n):  # every paper cites or is cited (as in Cora): no node without a neighbour
    same = np.flatnonzero(label == label[i])
    j = int(rng.choice(same[same != i]))
    edges.add((int(ids[i]), int(ids[j])))
while len(edges) < 5429:
    a, b = rng.integers(0, n, 2)
    if a != b and (label[a] == label[b] or rng.random() < 0.2):
        edges.add((int(ids[a]), int(ids[b])))
(here / "cora.cites").write_text("".join(f"{a}\t{b}\n" for a, b in sorted(edges)))
