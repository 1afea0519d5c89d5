"""A plain torch.distributed training script, as a user would write it for
env:// rendezvous: gloo, DistributedDataParallel, DistributedSampler over
MNIST-style IDX files in the first dataset.  Nothing in it knows Cohort
beyond the environment every such platform gives."""
import argparse
import gzip
import os
import struct

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


def read_idx(path):
    """IDX: two zero bytes, a type byte, the number of dimensions, the
    dimensions as big-endian 32-bit integers, then the bytes."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    values = torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8)
    return values.reshape(dims)


class IdxSet(Dataset):
    def __init__(self, images, labels):
        self.x = images.float().reshape(len(images), -1) / 255.0
        self.y = labels.long()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)
    parser.parse_args()
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    root = os.path.join(os.environ["DATASETS_PATH"], os.environ["DATASETS"].split(",")[0])
    data = IdxSet(read_idx(os.path.join(root, "train-images-idx3-ubyte")),
                  read_idx(os.path.join(root, "train-labels-idx1-ubyte")))
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=int(os.environ["BATCH_SIZE"]), sampler=sampler)
    net = nn.Sequential(nn.Linear(data.x.shape[1], 32), nn.ReLU(), nn.Linear(32, 10))
    model = nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=float(os.environ["LR"]))
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(int(os.environ["EPOCHS"])):
        sampler.set_epoch(epoch)
        total, steps = 0.0, 0
        for x, y in loader:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            total += loss.item()
            steps += 1
        print(f"rank {rank}/{world} epoch {epoch} loss {total / steps:.4f}", flush=True)
        print('COHORT_METRIC {"epoch": %d, "loss": %.6f}' % (epoch, total / steps), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
