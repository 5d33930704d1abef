"""The learners' torch side: the thread their torch work runs on, and their torch.distributed group (the
rendezvous, the network interface gloo uses, the collectives of a training round).

gloo picks its interface from `GLOO_SOCKET_IFNAME`, else from the address the machine's
hostname resolves to, and falls back to loopback when that is not local. On a host with
several interfaces (a cluster network beside the default one, a container, a network
namespace) that address is often one the other ranks cannot reach, and the group hangs in its
first collective. So, unless `GLOO_SOCKET_IFNAME` is set, each rank uses the interface its
route to the rendezvous host leaves by: the one the other ranks reach it through.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import queue
import socket
import struct
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from five_actors.errors import ConfigError

SIOCGIFADDR = 0x8915
"""Linux ioctl: an interface's IPv4 address."""

T = TypeVar("T")


class TorchThread:
    """One daemon thread that runs the learner's torch work in order.

    Daemon, unlike asyncio.to_thread's pool: a thread blocked in a collective on a peer that
    died must not keep the process from exiting. But a daemon thread still inside torch when
    the interpreter exits is torn down mid-call, and C++ aborts the process ("terminate called
    without an active exception"): a stopping learner `finish`es the thread first.
    """

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[
            tuple[Callable[[], Any], asyncio.Future[Any], asyncio.AbstractEventLoop] | None
        ] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    async def run(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the thread; its result or exception comes back here."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put((fn, future, loop))
        return await future

    def close(self) -> None:
        """Let the thread end after the jobs already queued."""
        self._jobs.put(None)

    async def finish(self, timeout: float) -> bool:
        """Close, then wait up to `timeout` seconds for the thread to end; False if it is still busy."""
        self.close()
        await asyncio.to_thread(self._thread.join, timeout)
        return not self._thread.is_alive()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, future, loop = job
            try:
                result, error = fn(), None
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                result, error = None, exc
            try:
                loop.call_soon_threadsafe(_settle, future, result, error)
            except RuntimeError:
                return  # the event loop is closed: nobody is waiting any more


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if not future.done():
        future.set_exception(error) if error is not None else future.set_result(result)


def join_group(host: str, port: int, rank: int, world_size: int, device: torch.device, timeout_s: float) -> None:
    """Join the group of `world_size` ranks at tcp://host:port (gloo on the CPU, NCCL on CUDA); blocks until all
    ranks are in."""
    if not port:
        raise ConfigError(
            "training.rendezvous_port: a learner world of more than one needs a rendezvous port (0 given)"
        )
    if device.type == "cuda":
        torch.cuda.set_device(device.index or 0)  # NCCL uses the current device
    elif "GLOO_SOCKET_IFNAME" not in os.environ:
        interface = route_interface(host, port)
        if interface is not None:
            os.environ["GLOO_SOCKET_IFNAME"] = interface
    dist.init_process_group(
        "nccl" if device.type == "cuda" else "gloo",
        init_method=f"tcp://{host}:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )


def route_interface(host: str, port: int) -> str | None:
    """The name of the interface this machine reaches `host` by (None where it cannot tell: IPv6, no route,
    not Linux)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))  # UDP: picks the route and source address, sends nothing
            source = probe.getsockname()[0]
        for _, name in socket.if_nameindex():
            if _ipv4_address(name) == source:
                return name
    except OSError:
        pass
    return None


def _ipv4_address(interface: str) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            request = struct.pack("256s", interface.encode()[:15])
            return socket.inet_ntoa(fcntl.ioctl(s.fileno(), SIOCGIFADDR, request)[20:24])
        except OSError:
            return None  # no IPv4 address on it


def leave_group() -> None:
    dist.destroy_process_group()


def average_gradients(module: torch.nn.Module, finite: bool, kl: float, world_size: int) -> tuple[bool, float]:
    """Replace each gradient of `module` by its mean over the group's ranks, in one allreduce. Returns whether every
    rank's loss was finite (`finite` is this rank's say) and the ranks' mean approximate KL (`kl` is this rank's).
    A parameter without a gradient counts as zero."""
    grads: list[torch.Tensor] = []
    for p in module.parameters():
        if p.requires_grad:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
    device = grads[0].device
    says = torch.tensor([float(finite), kl if finite else 0.0], device=device, dtype=grads[0].dtype)
    flat = torch.cat([g.reshape(-1) for g in grads] + [says])
    dist.all_reduce(flat)
    flat /= world_size
    if flat[-2].item() < 1.0:
        return False, 0.0
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()
    return True, flat[-1].item()


def broadcast_buffers(module: torch.nn.Module) -> None:
    """Give every rank rank 0's floating-point buffers of `module` (the normaliser statistics only rank 0 updates)."""
    floating = [b for b in module.buffers(recurse=True) if b.is_floating_point()]
    flat = torch.cat([b.reshape(-1).to(torch.float64) for b in floating])
    dist.broadcast(flat, src=0)
    offset = 0
    for b in floating:
        b.copy_(flat[offset : offset + b.numel()].view_as(b))
        offset += b.numel()


def broadcast_object(value: dict[str, Any] | None, device: torch.device) -> dict[str, Any]:
    """Rank 0's `value` on every rank."""
    box = [value]
    dist.broadcast_object_list(box, src=0, device=device if device.type == "cuda" else None)
    assert box[0] is not None
    return box[0]
