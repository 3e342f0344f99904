"""PESQ (ITU-T P.862, narrowband) of degraded 8 kHz WAVs against a reference.

Usage: pesq_score.py REFERENCE DEGRADED...   prints "PATH SCORE" per degraded file.
"""
import sys
import wave

import numpy as np
from pesq import pesq


def read(path):
    with wave.open(path, "rb") as w:
        assert w.getframerate() == 8000 and w.getsampwidth() == 2 and w.getnchannels() == 1, path
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64)


ref = read(sys.argv[1])
for path in sys.argv[2:]:
    deg = read(path)
    n = min(len(ref), len(deg))
    print(path, "%.3f" % pesq(8000, ref[:n], deg[:n], "nb"))
