"""perserve.torch end to end (conftest.py's job: rank 1 the actor, rank 2
the learner): samples as tensors that view the received message, updates
from tensors, the sampler thread on the CPU, and the CUDA paths: run where
there is a GPU, refused with a clear error where there is none."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import perserve  # noqa: E402 - after the skip: the tests need torch
import perserve.torch as ptorch  # noqa: E402
from conftest import SCHEMA, expected  # noqa: E402

N_ITEMS = 400
CUDA = torch.cuda.is_available()
TORCH_DTYPES = {np.dtype(np.uint8): torch.uint8, np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64,
                np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}


def check_columns(columns, ids):
    """Every column of the items `ids` holds what the actor sent for them."""
    for name, dtype, shape in SCHEMA:
        tensor = columns[name]
        assert tensor.dtype == TORCH_DTYPES[dtype] and tuple(tensor.shape) == (len(ids),) + shape, name
        assert np.array_equal(tensor.cpu().numpy(), expected(name, ids)), name


def test_fill(client, role):
    if role == "actor":
        ids = np.arange(N_ITEMS, dtype=np.int64)
        client.add({name: expected(name, ids) for name, _, _ in SCHEMA}, priorities=1.0 + ids % 3)
        client.flush()


def test_tensors_view_the_message_and_keep_it(client, role):
    if role == "actor":
        return
    sample = client.sample(64, beta=0.4)
    batch = ptorch.as_tensors(sample)
    ids = sample.columns["id"].copy()
    check_columns(batch.columns, ids)
    start = sample.message.ctypes.data
    for tensor in batch.columns.values():
        assert start <= tensor.data_ptr() < start + sample.message.nbytes  # a view: no copy
    assert np.shares_memory(batch.weights.numpy(), sample.weights)
    assert np.shares_memory(batch.probabilities.numpy(), sample.probabilities)
    assert batch.device == torch.device("cpu") and batch.keys.dtype == np.uint64 and len(batch) == 64
    assert repr(batch).startswith("perserve.torch.TensorSample(size=64, device=cpu, id: torch.int64[64]")
    assert repr(sample).startswith("perserve.Sample(size=64, id: int64[64]")
    assert torch.equal(batch.weights, torch.from_numpy(sample.weights))
    del sample  # the tensors alone keep the message: later samples cannot take its buffer
    for _ in range(6):
        client.sample(64, beta=0.4)
    check_columns(batch.columns, ids)


def test_updates_from_tensors(client, role):
    if role == "actor":
        return
    batch = ptorch.as_tensors(client.sample(32, beta=0.4))
    result = client.update_priorities(batch.keys, torch.full((32,), 2.0, dtype=torch.float32), wait=True)
    assert result.applied == 32
    keys = torch.from_numpy(batch.keys.astype(np.int64))  # keys as a tensor too
    assert client.update_priorities(keys, torch.ones(32, dtype=torch.float64), wait=True).applied == 32
    with pytest.raises(perserve.InvalidArgumentError, match="shape"):
        client.update_priorities(batch.keys, torch.ones(31))


def test_sampler_on_the_cpu(client, role):
    if role == "actor":
        return
    before = client.flush().applied
    with ptorch.TensorSampler(client, 48, beta=0.5, device="cpu", depth=2) as sampler:
        for _ in range(10):
            batch = sampler.next(timeout=30)
            check_columns(batch.columns, batch.columns["id"].numpy())
            assert not batch.columns["f32"].is_pinned()
            sampler.update_priorities(batch.keys, batch.weights * 3)  # a tensor in, sent by the thread
        sampler.beta = 1.0
        assert "TensorSampler(batch_size=48, beta=1.0" in repr(sampler)
    assert client.flush().applied == before + 10 * 48
    with pytest.raises(perserve.FailedPreconditionError, match="closed"):
        sampler.next()


def test_sampler_raises_what_its_thread_met(client, role):
    if role == "actor":
        return
    with ptorch.TensorSampler(client, 16, beta=0.4) as sampler:
        batch = sampler.next(timeout=30)
        sampler.update_priorities(batch.keys, torch.full((16,), float("nan")))
        with pytest.raises(perserve.InvalidArgumentError, match="priorit"):
            for _ in range(20):  # the rejection arrives with a later sample
                sampler.next(timeout=30)
        with pytest.raises(perserve.InvalidArgumentError):
            sampler.update_priorities(batch.keys, torch.ones(16))
    client.sample(16, beta=0.4)  # the learner stays usable: each rejection raises once


@pytest.mark.skipif(CUDA, reason="a GPU is here: the CUDA tests below run instead")
def test_cuda_refused_clearly_without_a_gpu(client, role):
    if role == "actor":
        return
    sample = client.sample(8, beta=0.4)
    with pytest.raises(perserve.FailedPreconditionError, match=r"torch.cuda.is_available\(\) is False"):
        ptorch.as_tensors(sample, "cuda")
    with pytest.raises(perserve.FailedPreconditionError, match="pin_memory=True needs CUDA"):
        ptorch.as_tensors(sample, pin_memory=True)
    with pytest.raises(perserve.FailedPreconditionError, match=r"torch.cuda.is_available\(\) is False"):
        ptorch.TensorSampler(client, 8, beta=0.4, device="cuda")
    with pytest.raises(perserve.InvalidArgumentError, match="'cpu' or 'cuda'"):
        ptorch.as_tensors(sample, "meta")


@pytest.mark.skipif(not CUDA, reason="no CUDA device (torch.cuda.is_available() is False)")
def test_cuda_sampler_moves_pinned_batches(client, role):
    if role == "actor":
        return
    with ptorch.TensorSampler(client, 64, beta=0.4, device="cuda") as sampler:
        for _ in range(5):
            batch = sampler.next(timeout=30)
            assert all(t.is_cuda for t in batch.columns.values()) and batch.weights.is_cuda
            check_columns(batch.columns, batch.columns["id"].cpu().numpy())
            sampler.update_priorities(batch.keys, batch.weights.abs() + 1)  # from the device
    moved = ptorch.as_tensors(client.sample(16, beta=0.4), "cuda")
    check_columns(moved.columns, moved.columns["id"].cpu().numpy())
