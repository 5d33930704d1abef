"""The learners' torch.distributed group: the rendezvous, and the network interface gloo uses.

gloo picks its interface from `GLOO_SOCKET_IFNAME`, else from the address the machine's
hostname resolves to, and falls back to loopback when that is not local. On a host with
several interfaces (a cluster network beside the default one, a container, a network
namespace) that address is often one the other ranks cannot reach, and the group hangs in its
first collective. So, unless `GLOO_SOCKET_IFNAME` is set, each rank uses the interface its
route to the rendezvous host leaves by: the one the other ranks reach it through.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from datetime import timedelta

import torch
import torch.distributed as dist

from five_actors.errors import ConfigError

SIOCGIFADDR = 0x8915
"""Linux ioctl: an interface's IPv4 address."""


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
