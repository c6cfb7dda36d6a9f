"""h5py writes and reads an HDF5 file in the directory argv[1]."""
import sys
import h5py
import numpy as np

path = sys.argv[1] + "/data.h5"
a = np.arange(200_000, dtype="float64").reshape(400, 500) * 0.5
with h5py.File(path, "w") as f:
    g = f.create_group("sim")
    g.attrs["step"] = 42
    g.create_dataset("temperature", data=a, chunks=(100, 100), compression="gzip")
    g.create_dataset("ids", data=np.arange(1000, dtype="int32"))
with h5py.File(path, "a") as f:
    f["sim/temperature"][10:20, 10:20] = -1.0
with h5py.File(path, "r") as f:
    t = f["sim/temperature"][:]
    print("step", f["sim"].attrs["step"], "shape", t.shape)
    print("sum", float(t.sum()), "ids", int(f["sim/ids"][:].sum()))
    print("keys", sorted(f["sim"].keys()))
