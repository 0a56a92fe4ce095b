"""Stand-in allocator snapshots, one per cause of an OOM (issue #16), in
torch's documented snapshot layout (torch.cuda.memory._snapshot(): segments
with device, address, total_size, allocated_size, active_size,
requested_size, stream, segment_type, segment_pool_id, is_expandable,
frames and blocks (address, size, requested_size, state, frames);
device_traces; allocator_settings), so that torch's own
torch.cuda._memory_viz reads them (test_oom_analysis.py checks it).

Each case is what the OOM observer would be called with (device, the
failed request, the device's free bytes), the snapshot, the lead
optimizer's storages (data pointers of parameters, gradients, state) and
the numbers trainmon's analysis must find, worked by hand beside them.
"""

MiB = 1 << 20
GiB = 1 << 30
TORCH_DIR = "/opt/venv/lib/python3.11/site-packages/torch"


def _frame(filename, line, name):
    return {"filename": filename, "line": line, "name": name}


def _user(filename, line, name, torch_dir):
    """A stack as torch records it, innermost first: torch's own frames
    and a "<frozen ...>" frame above the user's line (folded away)."""
    return [_frame(torch_dir + "/nn/modules/module.py", 1750, "_call_impl"),
            _frame("<frozen runpy>", 88, "_run_code"),
            _frame(filename, line, name),
            _frame("/work/job/main.py", 5, "<module>")]


def _segment(address, blocks, stype="large", device=0):
    """A segment holding blocks [(size, state, frames)] back to back."""
    out, a = [], address
    for size, state, frames in blocks:
        live = state == "active_allocated"
        out.append({"address": a, "size": size, "requested_size": size if live else 0,
                    "state": state, "frames": frames if live else []})
        a += size
    total = a - address
    alloc = sum(b["size"] for b in out if b["state"] == "active_allocated")
    return {"device": device, "address": address, "total_size": total,
            "allocated_size": alloc, "active_size": alloc, "requested_size": alloc,
            "stream": 0, "segment_type": stype, "segment_pool_id": (0, 0),
            "is_expandable": False, "frames": out[0]["frames"], "blocks": out}


def _snapshot(segments, requested, device_free):
    """The snapshot, with a trace: each segment's allocation, each live
    block's allocation, and the OOM last."""
    trace, t = [], 0
    for s in segments:
        t += 1
        trace.append({"action": "segment_alloc", "addr": s["address"], "size": s["total_size"],
                      "stream": 0, "time_us": t, "frames": s["frames"]})
        for b in s["blocks"]:
            if b["state"] == "active_allocated":
                t += 1
                trace.append({"action": "alloc", "addr": b["address"], "size": b["size"],
                              "stream": 0, "time_us": t, "frames": b["frames"]})
    trace.append({"action": "oom", "addr": 0, "size": requested, "device_free": device_free,
                  "stream": 0, "time_us": t + 1, "frames": []})
    return {"segments": segments, "device_traces": [trace],
            "allocator_settings": {"expandable_segments": False, "max_split_size": -1}}


def fragmentation(torch_dir=TORCH_DIR):
    """1 GiB asked for with 256 MiB free on the device; four 320 MiB large
    segments each keep a live block at their start and a free piece after
    it, and a small segment holds 512 KiB live and 1.5 MiB free.

      free pieces in the large pool: 280 + 280 + 280 + 279 = 1119 MiB, 4 of
        them, the largest 280 MiB (< 1 GiB: no piece fits it)
      free in total: 256 + 1119 = 1375 MiB >= 1024 MiB: fragmentation
      expandable_segments: whole 20 MiB pages (from the segment's start)
        inside the free pieces: [40, 320) MiB: 280 MiB (x3); [41, 320):
        from 60 to 320, 260 MiB; 840 + 260 = 1100 MiB; usable 256 + 1100 =
        1356 MiB >= 1024 MiB
      live: 40 x 3 + 41 + 0.5 = 161.5 MiB; reserved 4 x 320 + 2 = 1282 MiB
      blocks: 4 x 2 + 2 = 10
      sites: train.py:30:forward 40 x 3 + 41 = 161 MiB, data.py:9:collate
        0.5 MiB
    """
    fw = _user("/work/job/train.py", 30, "forward", torch_dir)
    segs = []
    for i, live in enumerate((40, 40, 40, 41)):
        segs.append(_segment(0x7F0000000000 + i * 320 * MiB,
                             [(live * MiB, "active_allocated", fw),
                              ((320 - live) * MiB, "inactive", [])]))
    segs.append(_segment(0x7E0000000000, [(512 << 10, "active_allocated",
                                            _user("/work/job/data.py", 9, "collate", torch_dir)),
                                           ((3 << 19), "inactive", [])], stype="small"))
    req, free = 1 * GiB, 256 * MiB
    return {"device": 0, "requested": req, "device_free": free, "total": 80 * GiB,
            "snapshot": _snapshot(segs, req, free), "ptrs": None,
            "expect": {"pool": 2, "largest_free": 280 * MiB, "free_cached": 1119 * MiB,
                       "fragments": 4, "expandable": 1356 * MiB, "live": 161.5 * MiB,
                       "reserved": 1282 * MiB, "blocks": 10, "cause": "fragmentation",
                       "sites": [("/work/job/train.py:30:forward", 161 * MiB),
                                 ("/work/job/data.py:9:collate", 0.5 * MiB)]}}


def _packed(address, sizes_frames, tail_free):
    """One large segment: live blocks back to back, then tail_free bytes free."""
    blocks = [(s, "active_allocated", f) for s, f in sizes_frames]
    if tail_free:
        blocks.append((tail_free, "inactive", []))
    return _segment(address, blocks)


def activations(torch_dir=TORCH_DIR):
    """512 MiB asked for with 100 MiB free; one 3860 MiB segment holds the
    parameters (2 x 128 MiB), Adam's state (2 x 256 MiB), no gradients
    (set_to_none before backward) and the forward's saved activations
    (8 x 256 MiB from attention, 4 x 256 MiB from the MLP), then 20 MiB free.

      live: 256 + 512 + 3072 = 3840 MiB; parameters 256, gradients 0,
        state 512, other (activations) 3840 - 768 = 3072 MiB: 80% of live
      largest free piece 20 MiB, 1 piece; free in total 100 + 20 = 120 MiB
        < 512 MiB: not fragmentation
      expandable: 100 + 20 = 120 MiB (the piece [3840, 3860) MiB is one
        whole 20 MiB page: 3840 = 192 x 20)
      sites: model.py:88:attention 2048 MiB, model.py:120:mlp 1024 MiB,
        train.py:50:train_step 512 MiB (the state: adam.py's frames are
        torch's), train.py:12:<module> 256 MiB
    """
    base = 0x7F0000000000
    P = _user("/work/job/train.py", 12, "<module>", torch_dir)
    S = [_frame(torch_dir + "/optim/adam.py", 160, "_init_group")] + \
        _user("/work/job/train.py", 50, "train_step", torch_dir)
    A = _user("/work/job/model.py", 88, "attention", torch_dir)
    M = _user("/work/job/model.py", 120, "mlp", torch_dir)
    blocks = [(128 * MiB, P)] * 2 + [(256 * MiB, S)] * 2 + [(256 * MiB, A)] * 8 + \
        [(256 * MiB, M)] * 4
    seg = _packed(base, blocks, 20 * MiB)
    starts = [b["address"] for b in seg["blocks"]]
    req, free = 512 * MiB, 100 * MiB
    return {"device": 0, "requested": req, "device_free": free, "total": 80 * GiB,
            "snapshot": _snapshot([seg], req, free),
            # a view into the first parameter's block counts once
            "ptrs": ([starts[0], starts[1], starts[0] + 4096], [], [starts[2], starts[3]]),
            "expect": {"pool": 2, "largest_free": 20 * MiB, "free_cached": 20 * MiB,
                       "fragments": 1, "expandable": 120 * MiB, "live": 3840 * MiB,
                       "reserved": 3860 * MiB, "blocks": 17,
                       "live_params": 256 * MiB, "live_grads": 0,
                       "live_optim_state": 512 * MiB, "live_other": 3072 * MiB,
                       "cause": "activations",
                       "sites": [("/work/job/model.py:88:attention", 2048 * MiB),
                                 ("/work/job/model.py:120:mlp", 1024 * MiB),
                                 ("/work/job/train.py:50:train_step", 512 * MiB),
                                 ("/work/job/train.py:12:<module>", 256 * MiB)]}}


def optimizer_state(torch_dir=TORCH_DIR):
    """2 GiB asked for with 1 GiB free, at the optimizer's first step (its
    state being made): fp32 parameters 2 GiB (4 x 512 MiB), gradients
    2 GiB, Adam's two moments 4 GiB (8 x 512 MiB) and 512 MiB of other
    tensors (2 x 256 MiB), then a 256 MiB free piece.

      live: 2048 + 2048 + 4096 + 512 = 8704 MiB; state 4096/8704 = 47%
        (>= 35%), other 512/8704 = 6% (< 50%): the optimizer's state
      free in total 1024 + 256 = 1280 MiB < 2048 MiB: not fragmentation
      expandable: the piece [8704, 8960) MiB holds the 20 MiB pages from
        8720 to 8960: 240 MiB; usable 1024 + 240 = 1264 MiB
      sharding over 8 ranks saves 4096 x 7/8 = 3584 MiB; 8-bit 4096 x 3/4 =
        3072 MiB
    """
    base = 0x7F0000000000
    P = _user("/work/job/train.py", 20, "build_model", torch_dir)
    G = [_frame(torch_dir + "/autograd/graph.py", 825, "_engine_run_backward")] + \
        _user("/work/job/train.py", 61, "train_step", torch_dir)
    S = [_frame(torch_dir + "/optim/adam.py", 160, "_init_group")] + \
        _user("/work/job/train.py", 62, "train_step", torch_dir)
    O = _user("/work/job/train.py", 58, "train_step", torch_dir)
    blocks = [(512 * MiB, P)] * 4 + [(512 * MiB, G)] * 4 + [(512 * MiB, S)] * 8 + \
        [(256 * MiB, O)] * 2
    seg = _packed(base, blocks, 256 * MiB)
    st = [b["address"] for b in seg["blocks"]]
    req, free = 2 * GiB, 1 * GiB
    return {"device": 0, "requested": req, "device_free": free, "total": 80 * GiB,
            "snapshot": _snapshot([seg], req, free),
            "ptrs": (st[0:4], st[4:8], st[8:16]),
            "expect": {"pool": 2, "largest_free": 256 * MiB, "free_cached": 256 * MiB,
                       "fragments": 1, "expandable": 1264 * MiB, "live": 8704 * MiB,
                       "reserved": 8960 * MiB, "blocks": 19,
                       "live_params": 2048 * MiB, "live_grads": 2048 * MiB,
                       "live_optim_state": 4096 * MiB, "live_other": 512 * MiB,
                       "cause": "optimizer_state",
                       "sites": [("/work/job/train.py:62:train_step", 4096 * MiB),
                                 ("/work/job/train.py:20:build_model", 2048 * MiB),
                                 ("/work/job/train.py:61:train_step", 2048 * MiB),
                                 ("/work/job/train.py:58:train_step", 512 * MiB)]}}


def first_forward(torch_dir=TORCH_DIR):
    """The OOM of the first forward pass, before the optimizer's first step
    (the most common one: a batch too big from the start): the optimizer is
    made but has not stepped, so it is found alive, not by its steps.  512
    MiB asked for with 100 MiB free; one 3860 MiB segment holds the
    parameters (4 x 192 MiB), no gradients and no state yet, and the
    forward's activations (8 x 256 MiB attention, 4 x 256 MiB MLP), then
    20 MiB free.

      live: 768 + 3072 = 3840 MiB; other 3072/3840 = 80%: activations
      (without the optimizer found: every live byte unknown, cause peak)
      largest free 20 MiB, 1 piece; 100 + 20 < 512: not fragmentation
      expandable: 100 + 20 = 120 MiB ([3840, 3860) MiB is one whole page)
      half the micro-batch saves 3072 / 2 = 1536 MiB
    """
    base = 0x7F0000000000
    P = _user("/work/job/train.py", 12, "<module>", torch_dir)
    A = _user("/work/job/model.py", 88, "attention", torch_dir)
    M = _user("/work/job/model.py", 120, "mlp", torch_dir)
    blocks = [(192 * MiB, P)] * 4 + [(256 * MiB, A)] * 8 + [(256 * MiB, M)] * 4
    seg = _packed(base, blocks, 20 * MiB)
    st = [b["address"] for b in seg["blocks"]]
    req, free = 512 * MiB, 100 * MiB
    return {"device": 0, "requested": req, "device_free": free, "total": 80 * GiB,
            "snapshot": _snapshot([seg], req, free), "step": False,
            "ptrs": (st[0:4], [], []),
            "expect": {"pool": 2, "largest_free": 20 * MiB, "free_cached": 20 * MiB,
                       "fragments": 1, "expandable": 120 * MiB, "live": 3840 * MiB,
                       "reserved": 3860 * MiB, "blocks": 17,
                       "live_params": 768 * MiB, "live_grads": 0,
                       "live_optim_state": 0, "live_other": 3072 * MiB,
                       "cause": "activations",
                       "sites": [("/work/job/model.py:88:attention", 2048 * MiB),
                                 ("/work/job/model.py:120:mlp", 1024 * MiB),
                                 ("/work/job/train.py:12:<module>", 768 * MiB)]}}


def frozen(torch_dir=TORCH_DIR):
    """A LoRA fine-tune: the base model's weights frozen (4 x 1536 MiB, held
    by a live module, by no optimizer), the adapter's 2 x 32 MiB held by
    the optimizer with 2 x 32 MiB of gradients and 4 x 32 MiB of Adam's
    state, the activations 6 x 256 MiB; 20 MiB free at the end.

      live: 6144 + 64 + 64 + 128 + 1536 = 7936 MiB
      parameters 6144 + 64 = 6208 MiB, gradients 64: (6208 + 64)/7936 =
        79% >= 50%: the parameters (with the frozen weights taken for
        activations, other would be 7680/7936 = 97%: activations, wrong)
      other 1536/7936 = 19%, state 128/7936 = 2%
      sharding over 8 ranks saves 6272 x 7/8 = 5488 MiB
      largest free 20 MiB; 100 + 20 < 512: not fragmentation
      expandable: [7936, 7956) MiB holds no whole page (7940..7940): 100 MiB
      sites: train.py:15:load_base 6144, model.py:88:attention 1536,
        train.py:62:train_step 128 (the state: adam.py's frames are
        torch's), train.py:20:add_adapter 64, train.py:61:train_step 64
        (ties by name)
    """
    base = 0x7F0000000000
    B = _user("/work/job/train.py", 15, "load_base", torch_dir)
    L = _user("/work/job/train.py", 20, "add_adapter", torch_dir)
    G = [_frame(torch_dir + "/autograd/graph.py", 825, "_engine_run_backward")] + \
        _user("/work/job/train.py", 61, "train_step", torch_dir)
    S = [_frame(torch_dir + "/optim/adam.py", 160, "_init_group")] + \
        _user("/work/job/train.py", 62, "train_step", torch_dir)
    A = _user("/work/job/model.py", 88, "attention", torch_dir)
    blocks = [(1536 * MiB, B)] * 4 + [(32 * MiB, L)] * 2 + [(32 * MiB, G)] * 2 + \
        [(32 * MiB, S)] * 4 + [(256 * MiB, A)] * 6
    seg = _packed(base, blocks, 20 * MiB)
    st = [b["address"] for b in seg["blocks"]]
    req, free = 512 * MiB, 100 * MiB
    return {"device": 0, "requested": req, "device_free": free, "total": 80 * GiB,
            "snapshot": _snapshot([seg], req, free),
            "ptrs": (st[4:6], st[6:8], st[8:12]), "frozen": st[0:4],
            "expect": {"pool": 2, "largest_free": 20 * MiB, "free_cached": 20 * MiB,
                       "fragments": 1, "expandable": 100 * MiB, "live": 7936 * MiB,
                       "reserved": 7956 * MiB, "blocks": 19,
                       "live_params": 6208 * MiB, "live_grads": 64 * MiB,
                       "live_optim_state": 128 * MiB, "live_other": 1536 * MiB,
                       "cause": "parameters",
                       "sites": [("/work/job/train.py:15:load_base", 6144 * MiB),
                                 ("/work/job/model.py:88:attention", 1536 * MiB),
                                 ("/work/job/train.py:62:train_step", 128 * MiB),
                                 ("/work/job/train.py:20:add_adapter", 64 * MiB),
                                 ("/work/job/train.py:61:train_step", 64 * MiB)]}}


CASES = {"fragmentation": fragmentation, "activations": activations,
         "optimizer_state": optimizer_state, "first_forward": first_forward, "frozen": frozen}


def legacy(snapshot):
    """The same segments as torch 1.13's memory_snapshot() gives them: a
    list of segments whose blocks have no address (they follow each other
    from the segment's) and carry their frames in "history"."""
    out = []
    for s in snapshot["segments"]:
        blocks = []
        for b in s["blocks"]:
            nb = {"size": b["size"], "state": b["state"]}
            if b["state"] == "active_allocated":
                nb["history"] = [{"addr": b["address"], "real_size": b["requested_size"],
                                  "frames": b["frames"]}]
            blocks.append(nb)
        out.append({"device": s["device"], "address": s["address"],
                    "total_size": s["total_size"], "allocated_size": s["allocated_size"],
                    "active_size": s["active_size"], "stream": s["stream"],
                    "segment_type": s["segment_type"], "blocks": blocks})
    return out
