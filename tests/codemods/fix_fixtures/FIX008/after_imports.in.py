# fix: {}
import argparse

import torch as T

print(T.ones(1))
