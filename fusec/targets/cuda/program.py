"""Running a compiled function on the GPU: the backend, direct launches, the program
(device-resident values between launches, the caller's stream) and CUDA graphs."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from fusec.codegen import KernelSource
from fusec.dialect.ops import spec_of
from fusec.errors import FusecError
from fusec.ir.dtypes import element_type, element_type_of
from fusec.ir.tensors import TensorSpec
from fusec.runtime.launch import nvtx_range
from fusec.targets.cuda.adapters import (
    TORCH_DTYPES,
    _Adapter,
    _adapter_for,
    _Buffer,
    _check,
    _device_copy,
    _family,
    _fill_nan,
    _from_dlpack,
    _torch_buffer,
)
from fusec.targets.cuda.env import (
    gpu_available,
    numba_cuda,
    require_cuda_compiler,
    simulator_enabled,
    sm_count,
)
from fusec.targets.cuda.graphs import (
    DriverCapture,
    ProgramGraphs,
    capture_stream,
    graphs_enabled,
)
from fusec.targets.cuda.kernels import load_kernel_module
from fusec.targets.cuda.streams import (
    StreamRef,
    explicit_handle,
    stream_ptr,
)

#: Bytes of arguments a launch at most for a call to go through the program's CUDA graph
#: (``CudaProgram._copies_pay``): a replay copies every argument into the graph's static
#: inputs, at ~2 TB/s (read and write), where the graph saves a few microseconds a launch:
#: 4 MB a launch is ~2 us of copying
GRAPH_BYTES_PER_LAUNCH = 4 << 20


def graph_copies_pay(argument_bytes: int, launches: int) -> bool:
    """Whether a graph replay's copies of ``argument_bytes`` of arguments cost less than
    the ``launches`` it saves (``GRAPH_BYTES_PER_LAUNCH``)."""
    return argument_bytes <= GRAPH_BYTES_PER_LAUNCH * max(1, launches)


class CudaBackend:
    """The ``cuda`` target of ``fusec.runtime.launch.Program``: Numba CUDA kernels."""

    target = "cuda"

    def __init__(self, cache: Any = None) -> None:
        from fusec.runtime.cache import default_cache

        require_cuda_compiler("target 'cuda' is not usable")
        if not simulator_enabled() and not gpu_available():
            raise FusecError("target 'cuda' needs an NVIDIA GPU, and none is usable here")
        self.cache = cache if cache is not None else default_cache()
        self.sms = sm_count()

    def load(self, kernel: KernelSource) -> Callable[..., Any]:
        module = load_kernel_module(kernel, self.cache)
        if getattr(module, "TORCH_FALLBACK", False):
            return TorchGroup(module, kernel)
        # linked cubins (Tensor Core GEMM, conv, attention): launched by address
        linked = getattr(module, "GEMM", None) or getattr(module, "LINKED", None)
        if linked is not None and not simulator_enabled():
            linked.load(self.sms)
            return linked
        if simulator_enabled() or len(getattr(module, "KERNELS", ())) != 1:
            return getattr(module, kernel.entry)
        return _DirectLaunch(module, self.sms)

    def run(self, launch: Any, fn: Callable[..., Any], inputs: list, alloc: Any) -> list:
        """Numpy in, numpy out (the generic ``Program`` path; ``CudaProgram`` keeps data on
        the device between launches instead)."""
        adapter = _Adapter("host", None)
        stream = adapter.stream(None)
        specs = launch.kernel.inputs
        bufs = [
            adapter.wrap(a, spec, stream, k, "group")
            for k, (a, spec) in enumerate(zip(inputs, specs, strict=True))
        ]
        outs = [adapter.empty(spec, stream) for spec in launch.kernel.outputs]
        if hasattr(fn, "direct"):
            fn.direct(stream.ptr, bufs, outs)
        else:
            fn(*(b.flat for b in bufs), *(o.flat for o in outs), stream=stream.numba, sms=self.sms)
        results = [adapter.result(o, stream) for o in outs]
        stream.synchronize()
        return results

    def call_scope(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()  # CudaProgram orders its launches on a stream

    def prepare(self, layout: str, array: Any) -> Any:
        """A constant in the layout a kernel names (``KernelSource.prepared_inputs``), on
        the host (``constant_layouts``: the W4A16 route's packed codes)."""
        from fusec.targets.cuda.constant_layouts import prepare

        return prepare(layout, array)

    def to_host(self, value: Any) -> Any:
        import numpy as np

        return np.asarray(value)


class TorchGroup:
    """A conv/matmul group that runs through PyTorch (``fusec.targets.cuda.torch_fallback``).

    Called with torch tensors of the group's operand types, on torch's current
    stream (the caller arranges that it is the call's stream); returns
    PyTorch's result tensors, checked against the group's result types.
    """

    def __init__(self, module: ModuleType, kernel: KernelSource) -> None:
        from fusec.extras import require

        require(
            "gpu",
            "conv/matmul groups on the cuda target run through PyTorch until their Tensor "
            "Core templates exist; this",
        )
        import torch

        self.torch = torch
        self.run = module.run
        self.outputs = kernel.outputs
        self.name = kernel.name
        self.dtypes = [getattr(torch, TORCH_DTYPES[spec.dtype]) for spec in kernel.outputs]

    def __call__(self, tensors: list[Any]) -> list[Any]:
        results = list(self.run(self.torch, *tensors))
        for k, (t, spec, dtype) in enumerate(zip(results, self.outputs, self.dtypes, strict=True)):
            if tuple(t.shape) != spec.shape or t.dtype != dtype:  # a code generator bug
                raise FusecError(
                    f"kernel {self.name}: result #{k} is {tuple(t.shape)} {t.dtype}, "
                    f"expected {spec}"
                )
            if not t.is_contiguous() or t.data_ptr() % 16:
                # a slice is a view: even a contiguous one at an odd offset would give the
                # next kernel's 16-byte vector loads a misaligned address (it did on the
                # H200: CUDA_ERROR_MISALIGNED_ADDRESS, found by the differential run)
                results[k] = t.clone(memory_format=self.torch.contiguous_format)
        return results


class _DirectLaunch:
    """Launch a generated module's one kernel straight through the driver.

    Same effect as the module's ``launch`` (same kernel, grid and stream), but
    without building numba device arrays or re-dispatching on argument types
    per call. The kernel's parameters follow Numba's array ABI (meminfo,
    parent, nitems, itemsize, data, shape, strides: seven 64-bit values per
    flat array); shapes are static, so a call only writes the data addresses
    into a prepared parameter block and makes one ``cuLaunchKernel`` call.
    """

    def __init__(self, module: ModuleType, sms: int) -> None:
        import ctypes
        import threading

        from cuda.bindings import driver as drv

        self.module = module
        self.drv = drv
        ((dispatcher, _signature),) = module.KERNELS
        overload = next(iter(dispatcher.overloads.values()))
        handle = overload._codelibrary.get_cufunc().handle
        self.function = drv.CUfunction(int(handle))
        self.blocks, self.threads = module.config(sms)
        self.count = len(overload.argument_types)
        self.values = (ctypes.c_int64 * (7 * self.count))()
        base = ctypes.addressof(self.values)
        self.pointers = (ctypes.c_void_p * (7 * self.count))(
            *(base + 8 * k for k in range(7 * self.count))
        )
        self.params = ctypes.addressof(self.pointers)
        self.lock = threading.Lock()
        self.streams: dict[int, Any] = {}
        self.sized = False

    def __call__(self, *arrays: Any, stream: Any = 0, sms: int = 0) -> None:
        """``arrays``: inputs then outputs, numba device arrays (the module's own order)."""
        self.module.launch(*arrays, stream=stream, sms=sms)

    def direct(self, stream: int, inputs: list[_Buffer], outputs: list[_Buffer]) -> None:
        """Launch on the raw stream handle ``stream`` with the buffers' addresses."""
        buffers = (*outputs, *inputs)  # kernel parameter order: outputs first
        if len(buffers) != self.count:
            raise FusecError(f"kernel takes {self.count} arrays, got {len(buffers)}")
        handle = self.streams.get(stream)
        if handle is None:
            handle = self.streams[stream] = self.drv.CUstream(stream)
        values = self.values
        with self.lock:
            if not self.sized:  # shapes are static: sizes are written once
                for k, buf in enumerate(buffers):
                    size = 4 if buf.spec.dtype == "f32" else 2
                    values[7 * k + 2] = values[7 * k + 5] = buf.n
                    values[7 * k + 3] = values[7 * k + 6] = size
                self.sized = True
            for k, buf in enumerate(buffers):
                values[7 * k + 4] = buf.ptr
            (err,) = self.drv.cuLaunchKernel(
                self.function, self.blocks, 1, 1, self.threads, 1, 1, 0, handle, self.params, 0
            )
        if int(err) != 0:
            raise FusecError(f"CUDA kernel launch failed: {err}")


def _program_base():
    from fusec.runtime.launch import Program

    return Program


class CudaProgram(_program_base()):  # type: ignore[misc]
    """A compiled function on the GPU: its launches, in order, on one stream.

    Arguments may be numpy arrays (copied in; results copied back, the only
    synchronisation), torch or cupy tensors, or any ``__cuda_array_interface__``
    / DLPack object (used in place; results of the same kind, on the caller's
    current stream, no synchronisation). Intermediate tensors between groups
    stay on the device.
    """

    #: ``CompiledModule(..., stream=s)`` queues the work on ``s``.
    takes_stream = True

    def __init__(
        self, module: Any, entry: str | None = None, target: Any = "cuda", cache: Any = None
    ) -> None:
        super().__init__(module, entry, "cuda", cache)
        self._specs = [spec_of(p) for p in self.function.function_type.inputs.data]
        self._argument_bytes: int | None = None
        self._name = self.function.sym_name.data
        self._constants: dict[int, _Buffer] = {}
        self._keep: list | None = None  # set while capturing: every buffer stays alive
        self._plan_slots()
        #: whole-program CUDA graphs of torch calls (``fusec.targets.cuda.graphs``);
        #: None turns them off for this program
        self.graphs: ProgramGraphs | None = ProgramGraphs(
            self._run, self._specs, DriverCapture(self._keeping)
        )

    def _plan_slots(self) -> None:
        """Number every value once, so that a call indexes a list (no IR objects)."""
        slot = {arg: k for k, arg in enumerate(self.function.body.block.args)}
        self._constant_slots = []
        for value in self.constants:
            slot[value] = len(slot)
            # the IR's type, not the array's: an i64 or i1 constant is one (issue 29)
            self._constant_slots.append((slot[value], self.constants[value], spec_of(value.type)))
        self._steps = []
        for launch in self.launches:
            laid_out = dict(launch.kernel.prepared_inputs)
            ins = [-1 if k in laid_out else slot[v] for k, v in enumerate(launch.operands)]
            for index, layout in laid_out.items():  # laid out once, at load
                key = (launch.operands[index], layout)
                if key not in slot:
                    slot[key] = len(slot)
                    array = self.prepared_constants[key]
                    dtype = element_type_of(array.dtype, floats_only=False)
                    assert dtype is not None, array.dtype  # (a layout of ours: int32 words)
                    spec = TensorSpec(tuple(array.shape), dtype)
                    self._constant_slots.append((slot[key], array, spec))
                ins[index] = slot[key]
            outs = []
            for value in launch.results:
                slot[value] = len(slot)
                outs.append(slot[value])
            self._steps.append((ins, outs, launch.kernel.outputs, launch.label))
        self._return_slots = [slot[v] for v in self.returns]
        self._slot_count = len(slot)

    def __call__(
        self,
        args: Sequence[Any],
        *,
        alloc: Any = None,
        stream: Any = None,
        poison: bool = False,
        recorder: Any = None,
    ) -> tuple:
        """Run on ``args``; ``poison`` (or any ``alloc``, as tests pass) fills every output
        with NaN first, so that an element no kernel writes shows up. ``recorder`` (a
        ``fusec.runtime.launch.LaunchRecorder``: ``fusec.profile``) times each launch:
        such a call runs launch by launch, never as a CUDA graph replay."""
        poison = poison or alloc is not None
        if len(args) != len(self._specs):
            raise FusecError(f"@{self._name} takes {len(self._specs)} argument(s), got {len(args)}")
        families = [_family(a) for a in args]
        if "dlpack" in families:
            pairs = zip(args, families, strict=True)
            args = [_from_dlpack(a) if f == "dlpack" else a for a, f in pairs]
            families = [_family(a) for a in args]
        first = next((k for k, f in enumerate(families) if f != "host"), None)
        adapter = _adapter_for(
            "host" if first is None else families[first], None if first is None else args[first]
        )
        stream_ref = adapter.stream(stream)
        fns = self._fns if self._fns is not None else self.load()  # compiled on first use
        if adapter.family == "torch" or self._torch_groups:  # torch work: on the call's stream
            with adapter.torch_context(stream_ref):
                if recorder is None and self._graphed(adapter, poison):
                    return self.graphs(args, adapter, stream_ref, fns)  # type: ignore[misc]
                return self._run(args, adapter, stream_ref, fns, poison, recorder)
        return self._run(args, adapter, stream_ref, fns, poison, recorder)

    def _graphed(self, adapter: _Adapter, poison: bool) -> bool:
        """Whether this call goes through the program's CUDA graphs: torch tensors on a
        GPU, graphs on, no poisoning, not inside an explicit ``capture``, no PyTorch
        fallback group (``fusec.targets.cuda.graphs`` says why)."""
        return (
            adapter.family == "torch"
            and self.graphs is not None
            and not poison
            and self._keep is None
            and not adapter.simulated
            and not self._torch_groups
            and self._copies_pay()
            and graphs_enabled()
        )

    def _copies_pay(self) -> bool:
        """Whether a replay's copies of the arguments into the graph's static inputs cost
        less than the launches the graph saves: at most ``GRAPH_BYTES_PER_LAUNCH`` bytes of
        arguments per launch. An MoE layer called with its expert weights as arguments
        (1.4 GB for Mixtral's) copied them every call: 1.9 of 5.9 ms on an H100 (profile
        of ``gemm_bench --moe``'s layer, 5 launches); a model's weights are constants, its
        arguments the activations (ResNet-50 at batch 32: 9.6 MB for 56 launches)."""
        if self._argument_bytes is None:
            self._argument_bytes = sum(
                math.prod(spec.shape) * element_type(spec.dtype).itemsize for spec in self._specs
            )
        return graph_copies_pay(self._argument_bytes, len(self.launches))

    def _keeping(self, buffers: list | None) -> None:
        """Keep every buffer of the calls that follow alive in ``buffers`` (None: stop)."""
        self._keep = buffers

    @property
    def _torch_groups(self) -> bool:
        return any(isinstance(fn, TorchGroup) for fn in self._fns or ())

    def _run(
        self,
        args: Sequence[Any],
        adapter: _Adapter,
        stream_ref: StreamRef,
        fns: list,
        poison: bool,
        recorder: Any = None,
    ) -> tuple:
        values: list[Any] = [None] * self._slot_count
        # each launch runs in an NVTX range, or in the recorder's span (chosen once a call)
        span = nvtx_range if recorder is None else recorder.spans(stream_ref)
        for index, arg in enumerate(args):
            values[index] = adapter.wrap(arg, self._specs[index], stream_ref, index, self._name)
        if self._constant_slots:
            for index, buffer in self._device_constants(stream_ref).items():
                values[index] = buffer
        for fn, (ins, outs, out_specs, label) in zip(fns, self._steps, strict=True):
            if fn is None:  # a view (reshape): the operand's buffer under the result's shape
                values[outs[0]] = values[ins[0]].reshaped(out_specs[0])
                continue
            inputs = [values[k] for k in ins]
            with span(label):
                if isinstance(fn, TorchGroup):
                    tensors = fn([adapter.as_torch(b) for b in inputs])
                    pairs = zip(tensors, out_specs, strict=True)
                    outputs = [_torch_buffer(t, spec) for t, spec in pairs]
                else:
                    outputs = self._launch(fn, adapter, stream_ref, inputs, out_specs, poison)
            for k, out in zip(outs, outputs, strict=True):
                values[k] = out
        if self._keep is not None:
            self._keep.extend(v for v in values if v is not None)
        results = tuple(adapter.result(values[k], stream_ref) for k in self._return_slots)
        if adapter.family == "host":
            stream_ref.synchronize()
        return results

    def _launch(
        self, fn: Any, adapter: _Adapter, stream: StreamRef, inputs: list, specs, poison: bool
    ) -> list[_Buffer]:
        """One Numba kernel group: outputs allocated (poisoned on request), one launch."""
        outputs = [adapter.empty(spec, stream) for spec in specs]
        if poison:
            for out in outputs:
                _fill_nan(out, stream)
        direct = getattr(fn, "direct", None)  # _DirectLaunch, GemmLaunch: by address
        if direct is not None:
            direct(stream.ptr, inputs, outputs)
        else:
            fn(
                *(b.flat for b in inputs),
                *(o.flat for o in outputs),
                stream=stream.numba,
                sms=self.backend.sms,
            )
        return outputs

    def _device_constants(self, stream: StreamRef) -> dict[int, _Buffer]:
        """The module's arith.constant tensors, uploaded once (slot -> buffer).

        Later calls may run on other streams, so the upload is waited for once.
        """
        if not self._constants and self._constant_slots:
            host = _Adapter("host", None)
            for index, array, spec in self._constant_slots:
                self._constants[index] = host.wrap(array, spec, stream, 0, "constant")
            stream.synchronize()
        return self._constants

    def capture(self, *args: Any, stream: Any = None) -> CudaGraph:
        """Record one call on ``args`` as a CUDA graph (see ``CudaGraph``)."""
        return CudaGraph(self, args, stream)

    def launch_recorder(self) -> Any:
        """A recorder timing each launch with CUDA events on the call's stream
        (``fusec.targets.cuda.profiling``)."""
        from fusec.targets.cuda.profiling import EventLaunchRecorder

        return EventLaunchRecorder()


class CudaGraph:
    """A captured call: replaying it relaunches every kernel with one graph launch.

    The inputs given at capture are the graph's (static) inputs: write new data
    into them (``graph.inputs[k][...] = ...``) and ``replay()``; the results
    are ``graph.outputs``, overwritten by each replay. Everything is recorded
    on a stream of its own, after one warm-up call that compiles and loads.
    """

    def __init__(self, program: CudaProgram, args: Sequence[Any], stream: Any = None) -> None:
        from cuda.bindings import driver as drv

        from fusec.targets.cuda.dependent import instantiate

        self.drv = drv
        cuda = numba_cuda()
        device_args = [_device_copy(a) for a in args]
        self.inputs = device_args
        program(device_args, stream=stream)  # warm-up: module load outside the capture
        if program._torch_groups:
            raise FusecError(
                "CUDA graph capture of conv/matmul groups that run through PyTorch is not "
                "supported (their Tensor Core templates will be capturable)"
            )
        stream_of_capture = capture_stream(cuda)  # non-blocking, kept for the process
        cuda.synchronize()
        handle = drv.CUstream(stream_ptr(stream_of_capture))
        mode = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        _check(drv.cuStreamBeginCapture(handle, mode))
        self.buffers: list[Any] = []
        program._keep = self.buffers  # intermediates must outlive the capture
        # torch allocations stay on torch's current stream, outside the capture: the
        # buffers are kept alive above, and the kernels are what is recorded
        capture = StreamRef(stream_ptr(stream_of_capture), stream_of_capture, current=True)
        try:
            outputs = program(device_args, stream=capture)
        except BaseException:
            drv.cuStreamEndCapture(handle)
            raise
        finally:
            program._keep = None
        graph = _check(drv.cuStreamEndCapture(handle))
        self.graph_exec = instantiate(graph)  # (programmatic edges between the kernels)
        self.graph = graph
        self.outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        # replays default to a blocking stream of the graph's own, ordered with the legacy
        # stream as the capture's was before it became non-blocking
        self.stream = cuda.stream()

    def replay(self, stream: Any = None) -> tuple:
        """Launch the graph on ``stream`` (default: the graph's own blocking stream); no
        synchronisation."""
        target = self.stream if stream is None else stream
        handle = self.drv.CUstream(explicit_handle(target))
        _check(self.drv.cuGraphLaunch(self.graph_exec, handle))
        return self.outputs
