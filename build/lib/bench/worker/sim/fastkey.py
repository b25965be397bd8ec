"""FakeTensorMode's dispatch cache, keyed and read faster, to the same values.

Every op of a sim step goes through FakeTensorMode's dispatch cache. Two parts of it cost most
of a step, and ``install(mode)`` gives one mode instance a faster copy of each:

- The key flattens each FakeTensor argument into its metadata (``extract_tensor_metadata`` +
  ``TensorMetadata._flatten_into``: a dataclass built and walked field by field per argument,
  per op; on a 7B step about a quarter of the step's time). ``prep_args_for_hash`` appends
  exactly the same values, in the same order, for the common argument (a dense strided
  FakeTensor of this mode, no symbolic sizes, no constant), written out directly; every other
  argument goes through torch's own code unchanged.
- A hit builds the output from the entry's metadata (``_get_output_tensor_from_cache_entry``:
  generators and two context managers per op). ``output_from_cache_entry`` does the same calls
  in the same dispatch state for the common entry (a new strided tensor, no shape environment),
  written out, and makes the FakeTensor of a cpu device as ``FakeTensor.__new__`` does, without
  its argument checks and descriptor calls; every other entry goes through torch's code. 13%
  and then 8% of a small step's CPU time.

The key decides only whether the cache is hit (a hit gives what the op would compute: that is
the cache's contract), and it is the same key; the output is the same tensor. So what the step
computes is unchanged. tests/test_sim_fastkey.py holds the two keys equal, and the two outputs
equal field by field (their attribute dicts in order, dispatch keys, data-pointer guard; and
through torch's own cache cross-check), on every op of real sim steps.
"""
from __future__ import annotations

import types

import torch
from torch._subclasses import fake_tensor as ft

_ORIGINAL = ft.FakeTensorMode._prep_args_for_hash
_LENGTH = [f"length_{n}" for n in range(64)]
_STRIDED = torch.strided


def _length(n: int) -> str:
    return _LENGTH[n] if n < 64 else f"length_{n}"


def prep_args_for_hash(self, result: list, args, state, id_hashed_objects: list) -> None:
    """torch's ``FakeTensorMode._prep_args_for_hash`` with its FakeTensor branch written out for
    dense strided tensors without symbolic sizes (what ``extract_tensor_metadata(t).
    _flatten_into`` appends for them); anything else is handed to torch's code, argument by
    argument, so that the appended values and the bypasses raised are torch's."""
    kind = type(args)
    if kind is dict or not (kind is tuple or kind is list):
        return _ORIGINAL(self, result, args, state, id_hashed_objects)
    result.append(kind)
    result.append(_length(len(args)))
    append = result.append
    for arg in args:
        if (type(arg) is ft.FakeTensor and arg.fake_mode is self and arg.constant is None
                and arg.layout is _STRIDED and not arg._has_symbolic_sizes_strides):
            shape, stride = arg.shape, arg.stride()
            memory_format = ft.suggest_memory_format(arg)
            if not arg.is_contiguous(memory_format=memory_format):
                memory_format = None
            append(arg.dtype)
            append(torch.Size)
            append(_length(len(shape)))
            for n in shape:
                append(int)
                append(n)
            append(tuple)
            append(_length(len(stride)))
            for n in stride:
                append(int)
                append(n)
            append(arg.device)
            append(_STRIDED)
            append(memory_format)
            append(arg.storage_offset())
            append(arg.untyped_storage().nbytes())
            append(arg.requires_grad)
            append(arg.is_quantized)
            append(arg.is_conj())
            append(arg.is_neg())
            append(arg.is_inference())
            append(arg.is_sparse)
            append(None)  # is_coalesced, dense_dim, sparse_dim: dense tensors have none
            append(None)
            append(None)
        else:
            # torch's own branch for this one argument: what it appends after the list's
            # type and length is exactly what it appends for that element of a list
            mark = len(result)
            _ORIGINAL(self, result, (arg,), state, id_hashed_objects)
            del result[mark:mark + 2]  # the (tuple, "length_1") of the one-element wrapper


def install(mode: ft.FakeTensorMode) -> ft.FakeTensorMode:
    """``mode`` with the fast key (its instance only; torch's class is untouched)."""
    mode._prep_args_for_hash = types.MethodType(prep_args_for_hash, mode)
    mode._get_output_tensor_from_cache_entry = types.MethodType(output_from_cache_entry, mode)
    return mode


_ORIGINAL_OUTPUT = ft.FakeTensorMode._get_output_tensor_from_cache_entry
_DisableTorchDispatch = torch._C._DisableTorchDispatch
_PreserveDispatchKeyGuard = torch._C._PreserveDispatchKeyGuard
_set_meta_in_tls = torch._C._set_meta_in_tls_dispatch_include
_empty_strided = torch.empty_strided


def output_from_cache_entry(self, state, entry, key, func, args):
    """torch's ``FakeTensorMode._get_output_tensor_from_cache_entry`` for the common entry (a
    new tensor's metadata, no shape environment: plain int sizes) with its context managers and
    generators written out: the same ``empty_strided`` on meta under the same dispatch state as
    ``in_kernel_invocation_manager`` sets, the same conj/neg bits and view storage, the same
    ``FakeTensor(...)``. Anything else is torch's code."""
    metadata = entry.metadata
    if (metadata is None or entry.inplace_idx is not None or self.shape_env is not None
            or metadata.layout is not _STRIDED):
        return _ORIGINAL_OUTPUT(self, state, entry, key, func, args)
    shape, stride = metadata.shape, metadata.stride
    prev = self.in_kernel_invocation
    with _DisableTorchDispatch():
        self.in_kernel_invocation = True
        with _PreserveDispatchKeyGuard():
            _set_meta_in_tls(True)
            try:
                empty = _empty_strided(shape, stride, dtype=metadata.dtype, layout=_STRIDED, device="meta",
                                       requires_grad=metadata.requires_grad)
                if metadata.is_conj:
                    torch._C._set_conj(empty, True)
                if metadata.is_neg:
                    torch._C._set_neg(empty, True)
                if isinstance(func, torch._ops.OpOverload) and func.is_view:
                    storage = args[entry.view_idx].untyped_storage()
                    empty.set_(storage, metadata.storage_offset, shape, stride)
            finally:
                self.in_kernel_invocation = prev
    device = metadata.device
    if device.type != "cpu" or ft.FakeTensorConfig.debug or torch.compiler.is_exporting():
        return ft.FakeTensor(self, empty, device)
    return _fake_tensor(self, empty, device)


_MAKE_SUBCLASS = torch.Tensor._make_subclass
_MEMOS = ("nonzero_memo", "item_memo", "unique_memo", "unique_consecutive_memo", "nested_int_memo")
_UNSET = {"constant": None, "pytype": None, "dispatch_keys": None, "real_tensor": None,
          **{f"_{memo}{part}": None for memo in _MEMOS for part in ("", "_vc", "_epoch")}}


def _fake_tensor(mode, elem, device) -> ft.FakeTensor:
    """What ``FakeTensor(mode, elem, device)`` builds for a cpu ``device`` (which torch's
    ``_normalize_fake_device`` leaves as it is), outside export and FakeTensor's debug mode: the
    same subclass made the same way, the same mutable-data-pointer guard, the same attributes in
    the same order (the memo descriptors' three slots each, all None), without the constructor's
    argument checks and descriptor calls."""
    t = _MAKE_SUBCLASS(ft.FakeTensor, elem, elem.requires_grad, dispatch_device=True, device_for_backend_keys=device)
    if not mode._allow_unsafe_data_ptr_access:
        torch._C._set_throw_on_mutable_data_ptr(t)
    else:
        torch._C._set_warn_deprecated_on_mutable_data_ptr(t)
    state = t.__dict__
    state["_fake_device"] = device
    state["fake_mode"] = mode
    state.update(_UNSET)
    return t
