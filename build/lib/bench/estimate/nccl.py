"""NCCL's own device memory per GPU for a single-node data-parallel job (modelled, not measured).

Rule, for one communicator of N ranks on one node, on its busiest (middle) rank, with NCCL
2.26-2.30 defaults (cuMem on, connections made lazily per algorithm, NCCL_RUNTIME_CONNECT=1):

    bytes = channel_structs + ring + tree + nvls
    ring  = C x (send + recv)     one send and one recv P2P connection per ring channel
    tree  = C x (send + recv)     N > 2: the intra-node chain adds one send and one recv a channel
                                  (for N = 2 its peers are the ring's and NCCL reuses them)
    nvls  = 16 x 2 x 1 MiB x N + (C + 1) granules   NVSwitch, Hopper or later, N > 2 only
    channel_structs = (3 x pow2up(C) + 2) granules  small per-channel device structures

with send = 2 MiB and recv = 10 MiB (4 KiB header + LL 512 KiB + LL128 4.6875 MiB + Simple 4 MiB,
rounded up to the 2 MiB granule), and C the ring channel count NCCL's topology search yields
(connect.cc doubles the search's channels). Sources: NVIDIA/nccl tag v2.27.3-1, file:line at
each constant below; env defaults at https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html.

Leaves out: the CUDA context and the NCCL kernels loaded into it; host memory (work FIFO,
proxy, SHM transport); point-to-point/all-to-all connections (connIndex 1, p2p channels);
more than one communicator (each adds its own); multi-node (NET/IB, PXN, collnet); env
overrides (NCCL_BUFFSIZE, NCCL_*NCHANNELS, NCCL_NVLS_ENABLE=0 -> pass nvls=False); PCIe boxes
where P2P is unavailable (GeForce cards, GPUs under different CPU root ports on Intel hosts,
paths.cc:308-319), where the SHM transport puts the connection buffers in host memory, so
ring and tree are then an over-estimate; NCCL <= 2.21, which connected rings and trees at init
and sized NVLS at 16 x 2 x (1 MiB + 2 MiB) x N rounded to the multicast granularity
(nvls.cc:311-314 at v2.21.5-1); NCCL_CUMEM_ENABLE=0, where channel_structs is ~0.
"""
from __future__ import annotations

MiB = 1 << 20
NCCL_STEPS = 8  # device.h:25
LL_BUFFSIZE = 8 * 512 * NCCL_STEPS * 16  # init.cc:618; device.h:93-94, sizeof(ncclLLFifoLine)=16 (device.h:71)
LL128_BUFFSIZE = 120 * 640 * NCCL_STEPS * 8  # init.cc:619; device.h:110-111, uint64_t elements
SIMPLE_BUFFSIZE = 1 << 22  # init.cc:620 DEFAULT_BUFFSIZE (NCCL_BUFFSIZE, 4 MiB)
CONN_HEADER = 4096  # sizeof(ncclSendMem) = sizeof(ncclRecvMem) = MEM_ALIGN (comm.h:34, 42-66)
GRANULE = 2 * MiB  # CUDA_IPC_MIN (comm.h:35; p2p.cc:380,448); cuMem minimum granularity (alloc.h:225-226)
STRUCT_ALLOCS_PER_CHANNEL = 3  # channel.cc:42,45,56 via ncclCudaCallocAsync -> ncclCuMemAlloc (alloc.h:337-338)
STRUCT_ALLOCS_PER_COMM = 2  # init.cc:447,449
MAX_CHANNELS = 64  # MAXCHANNELS, device.h:87 (32 before 2.19); default NCCL_MAX_NCHANNELS (connect.cc:342-351)
NVLS_CHANNELS = 16  # NVLS_NCHANNELS_SM90, nvls.cc:147
NVLS_CHUNKSIZE = 128 * 1024  # NCCL_NVLS_CHUNKSIZE, nvls.cc:152; buffer sizing nvls.cc:333-337
NVLS_MIN_RANKS = 3  # nvls.cc:160: no NVLS when the communicator has <= 2 GPUs

# Ring channels after the topology search (search.cc:886-898 duplication, 902/907 speed arrays,
# topo.h:18-22 link bandwidths) and connect.cc:452 (x2):
#  pcie: Gen4/Gen5 x16 under one CPU: 2 search channels at 12 GB/s (1 at 20-40 duplicated) -> 4;
#        Gen3 x16 or across CPU sockets: 1 -> 2.
#  nvlink: two GPUs on a 4-link bridge (RTX 3090 / RTX A6000, 12 GB/s a link): 1 at 40, dup 2 -> 4.
#  nvswitch: A100 (12 x 20 GB/s) 6 at 40 -> dup 12 -> 24; H100 (18 x 20.6) 6 at 60 -> dup 12 -> 24.
CHANNELS = {"pcie": 4, "nvlink": 4, "nvswitch": 24}

LABEL = ("modelled: NCCL's device buffers from its documented defaults (NCCL 2.26-2.30 source: "
         "buffer sizes, topology-search channel counts, cuMem 2 MiB granules); one communicator, "
         "single node, busiest rank; excludes the CUDA context and NCCL's kernels")


def _align(n: int, a: int = GRANULE) -> int:
    return -(-n // a) * a


def _pow2up(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def connection_bytes(p2p_read: bool = False) -> tuple[int, int]:
    """(send, recv) device bytes of one P2P connection (p2p.cc:377-380, 445-448).

    With P2P read (A100 over NVLink only, paths.cc:358) the Simple buffer moves to the sender.
    """
    send = CONN_HEADER + (SIMPLE_BUFFSIZE if p2p_read else 0)
    recv = CONN_HEADER + LL_BUFFSIZE + LL128_BUFFSIZE + (0 if p2p_read else SIMPLE_BUFFSIZE)
    return _align(send), _align(recv)


def device_bytes(world_size: int, interconnect: str, nvls: bool | None = None,
                 *, channels: int | None = None) -> dict:
    """NCCL device bytes per GPU for one N-rank communicator on one node (see module doc)."""
    if interconnect not in CHANNELS:
        raise ValueError(f"interconnect must be one of {sorted(CHANNELS)}, got {interconnect!r}")
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if nvls and interconnect != "nvswitch":
        raise ValueError("nvls=True needs interconnect='nvswitch' (NVLS is NVSwitch multicast)")
    empty = {"channel_structs": 0, "ring": 0, "tree": 0, "nvls": 0}
    if world_size == 1:
        return {"bytes": 0, "channels": 0, "per_channel_bytes": 0, "parts": empty,
                "rule": "world size 1: no NCCL communicator, 0 bytes"}
    c = channels if channels is not None else CHANNELS[interconnect]
    if not 1 <= c <= MAX_CHANNELS:
        raise ValueError(f"channels must be in 1..{MAX_CHANNELS}, got {c}")
    use_nvls = (interconnect == "nvswitch" if nvls is None else nvls) and world_size >= NVLS_MIN_RANKS
    send, recv = connection_bytes()
    per_channel = send + recv
    structs = (STRUCT_ALLOCS_PER_CHANNEL * _pow2up(c) + STRUCT_ALLOCS_PER_COMM) * GRANULE  # paths.cc:829-858
    nvls_bytes = 0
    if use_nvls:  # buffer nvls.cc:333-337; credit granule nvls.cc:404-433; nvlsDevPeers channel.cc:93
        nvls_bytes = NVLS_CHANNELS * 2 * NVLS_CHUNKSIZE * NCCL_STEPS * world_size + (c + 1) * GRANULE
    parts = {"channel_structs": structs, "ring": c * per_channel,
             "tree": c * per_channel if world_size > 2 else 0, "nvls": nvls_bytes}
    rule = (f"NCCL 2.26-2.30 defaults, {interconnect}, N={world_size}, busiest rank: "
            f"{c} ring channels x {per_channel // MiB} MiB (send {send // MiB} + recv {recv // MiB})"
            f"{' + tree, same again' if world_size > 2 else ''}"
            f" + {structs // GRANULE} x 2 MiB channel structures"
            f"{' + NVLS 16 x 2 x 1 MiB x N + granules' if use_nvls else ''}")
    return {"bytes": sum(parts.values()), "channels": c, "per_channel_bytes": per_channel,
            "rule": rule, "parts": parts}


# -- a cell's GPUs -------------------------------------------------------------------------------
NVSWITCH_NVLINK_GBS = 300  # SXM boards (A100, H100, H200): 8 GPUs on NVSwitch; matrix/gpus.yaml nvlink_gbs


def interconnect(profile: dict) -> str:
    """The link a node of this GPU gives NCCL, from matrix/gpus.yaml: an SXM card (``nvlink_gbs`` of
    300 GB/s a direction or more) sits on an NVSwitch board; any other card talks over PCIe (a
    two-card NVLink bridge gives the same 4 channels, ``CHANNELS``)."""
    return "nvswitch" if (profile.get("nvlink_gbs") or 0) >= NVSWITCH_NVLINK_GBS else "pcie"


def setting(profile: dict) -> dict:
    """The inputs of ``device_bytes`` a GPU profile gives: its interconnect, and NVLS (NVSwitch
    multicast, Hopper and later: ``gpu_class`` hopper) on or off."""
    link = interconnect(profile)
    return {"interconnect": link, "nvls": link == "nvswitch" and profile.get("gpu_class") == "hopper"}


def by_gpu(world_size: int, profiles: dict) -> dict[str, dict]:
    """{gpu: {bytes, interconnect, nvls, channels, rule}} of one data-parallel communicator of
    ``world_size`` ranks on each CUDA GPU of ``profiles``; empty at world size 1 or without CUDA GPUs.
    NCCL makes its buffers at the communicator's first collectives, after the model is loaded: they
    count in the step's need, not in the load's."""
    if world_size <= 1:
        return {}
    out = {}
    for gpu, prof in profiles.items():
        if prof.get("kind") != "cuda":
            continue
        s = setting(prof)
        got = device_bytes(world_size, s["interconnect"], s["nvls"])
        out[gpu] = {"bytes": got["bytes"], **s, "channels": got["channels"], "rule": got["rule"]}
    return out


def recorded(details: dict) -> dict[str, int]:
    """{gpu: NCCL bytes} a record's ``details.nccl`` holds (empty for a one-process cell)."""
    return {g: int(v["bytes"]) for g, v in ((details or {}).get("nccl") or {}).get("by_gpu", {}).items()}


def disagreements(details: dict, world_size: int) -> list[str]:
    """Where a record's ``details.nccl`` is not what this rule gives for its own settings."""
    out = []
    for gpu, v in ((details or {}).get("nccl") or {}).get("by_gpu", {}).items():
        want = device_bytes(world_size, v["interconnect"], v["nvls"])["bytes"]
        if v.get("bytes") != want:
            out.append(f"details.nccl.by_gpu.{gpu}.bytes is {v.get('bytes')!r}; NCCL's rule at world size "
                       f"{world_size} over {v['interconnect']} (NVLS {'on' if v['nvls'] else 'off'}) gives {want}")
    return out
