"""Regenerates tests/data/kv/e4m3.json: float32 values and their e4m3 codes as ml_dtypes
(float8_e4m3fn, round to nearest even) converts them, the reference for kv/kv_format.cpp's
f32_to_e4m3. Values stay within +-464 (ml_dtypes turns larger ones into NaN where the engine
saturates to 448, as CUDA's __NV_SATFINITE does).
Run: python3 tests/scripts/make_kv_format_fixtures.py  (needs numpy, ml_dtypes)"""
import json
import pathlib

import ml_dtypes
import numpy as np

rng = np.random.default_rng(5)
mags = np.exp2(rng.uniform(-12, np.log2(464), 3000)).astype(np.float32)
signs = np.where(rng.random(3000) < 0.5, -1, 1).astype(np.float32)
values = list((mags * signs).astype(np.float32))
# Every code's value and the midpoints between neighbours (ties round to even).
codes = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
finite = np.unique(codes[np.isfinite(codes)])
values += list(finite)
values += list(((finite[1:] + finite[:-1]) / 2).astype(np.float32))
values = np.array(values, dtype=np.float32)
out = np.asarray(values.astype(ml_dtypes.float8_e4m3fn)).view(np.uint8)
data = {"ml_dtypes": ml_dtypes.__version__,
        "values": [float(v) for v in values], "codes": [int(c) for c in out]}
path = pathlib.Path(__file__).resolve().parents[1] / "data" / "kv" / "e4m3.json"
path.write_text(json.dumps(data))
print(f"wrote {len(values)} values to {path}")
