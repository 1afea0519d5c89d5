# The PyTorch reference of bench/train: DDP over gloo, 784-256-128-10, SGD
# with momentum, per-rank batch 64, DistributedSampler, EPOCHS epochs
# (default 1) over the IDX files cohort-worker mkdata wrote; prints the
# samples/s of each epoch.
# usage: ddp_ref.py DATA_DIR [EPOCHS]
import os, struct, sys, time
import torch
import torch.distributed as dist
import torch.nn as nn


def idx(path):
    with open(path, 'rb') as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack('>' + 'I' * ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def main():
    torch.set_num_threads(1)
    dist.init_process_group('gloo')
    d = sys.argv[1]
    x = idx(os.path.join(d, 'train-images-idx3-ubyte')).reshape(-1, 784).float() / 255
    y = idx(os.path.join(d, 'train-labels-idx1-ubyte')).long()
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                          nn.Linear(128, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    sampler = torch.utils.data.distributed.DistributedSampler(range(len(y)), seed=1)
    loss_fn = nn.CrossEntropyLoss()
    epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    for epoch in range(1, epochs + 1):
        sampler.set_epoch(epoch)
        idxs = torch.tensor(list(sampler))
        t0 = time.time()
        for off in range(0, len(idxs), 64):
            b = idxs[off:off + 64]
            opt.zero_grad()
            loss_fn(ddp(x[b]), y[b]).backward()
            opt.step()
        dt = time.time() - t0
        if dist.get_rank() == 0:
            print('epoch %d: %.0f samples/s' % (epoch, len(idxs) * dist.get_world_size() / dt),
                  flush=True)
    dist.destroy_process_group()


main()
