# a smaller run for quick checks: python train.py config/tiny.py
max_iters = 10
eval_interval = 5
n_layer = 1
