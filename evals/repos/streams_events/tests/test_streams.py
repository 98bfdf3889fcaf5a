import torch

from seqmodel import GRUClassifier, make_sequences


def test_classifier_on_side_stream():
    x, y = make_sequences(n=8)
    model = GRUClassifier().cuda()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        out = model(x.cuda())
    torch.cuda.synchronize()
    assert out.shape == (8, 3)


def test_event_timing_is_non_negative():
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    a.record()
    torch.ones(64, 64, device="cuda").sum()
    b.record()
    b.synchronize()
    assert a.elapsed_time(b) >= 0.0


def test_labels_cover_classes():
    _, y = make_sequences()
    assert set(y.tolist()) <= {0, 1, 2}
