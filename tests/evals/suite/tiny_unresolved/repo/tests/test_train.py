from train import train


def test_loss_goes_down():
    assert train(8) < train(1)
