"""zhouhaoyi/Informer2020 trains on the ETT electricity-transformer CSVs (downloaded by hand from the
ETDataset repository into data/ETT/). We write a small synthetic stand-in of the same layout:
data/ETT/small.csv with an hourly `date` column and the seven load/temperature columns HUFL, HULL,
MUFL, MULL, LUFL, LULL and OT (the default target), daily and weekly cycles plus noise. 600 rows:
`--data custom` splits them 70/10/20 into train/validation/test. Standard library only."""

from __future__ import annotations

import csv
import math
import os
import random
from datetime import datetime, timedelta

COLUMNS = ("HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT")
ROWS = 600

rng = random.Random(7)
os.makedirs("data/ETT", exist_ok=True)
start = datetime(2016, 7, 1)
with open("data/ETT/small.csv", "w", newline="") as fh:
    out = csv.writer(fh)
    out.writerow(("date", *COLUMNS))
    for i in range(ROWS):
        day, week = math.sin(2 * math.pi * i / 24), math.sin(2 * math.pi * i / 168)
        values = [round(3.0 * (k + 1) * (0.5 + 0.4 * day + 0.2 * week) + rng.gauss(0, 0.3), 3)
                  for k in range(len(COLUMNS))]
        out.writerow(((start + timedelta(hours=i)).strftime("%Y-%m-%d %H:%M:%S"), *values))
