// Package activity says what a rank is doing from one stack sample of
// its threads (native and Python frames) and what the probes know it
// waits on: the activity the early warning names when a rank lags behind
// its peers (timer's "Lagging ranks"), or when a rank has issued no
// collective for a while. Classify is a pure function; its rules follow.
//
// # The thread
//
// The rank's main thread (the thread whose id is the pid: the one that
// drives training in PyTorch and most jobs) is read; when the sample
// lacks it, the first thread with Python frames, else the first thread.
//
// # The rules, in order (the first that holds decides)
//
//   - gc: a native frame of the thread is one of CPython's collection
//     routines (gc_collect_main, collect, _PyGC_Collect, gc_collect_region,
//     ...; collect only in the interpreter's own module): the interpreter
//     collects garbage, whatever Python code it was running. Detail: the
//     innermost Python frame, when there is one.
//   - checkpoint: a frame saves or loads a checkpoint. Python: save,
//     _save, _legacy_save, load, _load, _legacy_load of
//     torch/serialization.py; any frame of torch/distributed/checkpoint/
//     (DCP) or safetensors/; any function whose name has the word save
//     or saving (save_checkpoint, save_pretrained, _save), or the word
//     checkpoint or ckpt beside write, dump, store, persist or load
//     (write_checkpoint, load_ckpt). Never a frame of
//     torch/utils/checkpoint.py (activation checkpointing recomputes in
//     the backward pass, it saves nothing). Native: PyTorch's stream
//     writer and reader (caffe2::serialize::PyTorchStreamWriter,
//     PyTorchStreamReader). Detail: the outermost such frame (where the
//     job saves).
//   - compile: a Python frame of torch.compile's compiler (torch/_dynamo/
//     convert_frame.py, symbolic_convert.py, output_graph.py;
//     torch/_inductor/ compile_fx.py, graph.py, codecache.py,
//     async_compile.py, scheduler.py, codegen/; torch/_functorch/
//     aot_autograd.py and _aot_autograd/) or of Triton's (triton/compiler/),
//     or a native frame in libtriton: the rank compiles. Not the frames
//     a compiled function runs through at every call (dynamo's
//     eval_frame.py, Triton's jit.py launcher). Detail: the outermost such
//     Python frame, else the native one.
//   - dataloader: a Python frame of torch/utils/data/dataloader.py or
//     torch/utils/data/_utils/, or one of DataLoader's iterator routines
//     by name (_next_data, _get_data, _try_get_data): the rank waits for a
//     batch (its workers', or its own loading with no workers). Detail:
//     the innermost such frame.
//   - collective, gpu-wait: the thread waits on the GPU, by its native
//     stack (collector/capture/gpuwait) or by the probes (Facts.TID is the
//     thread). A call that returns at once in a job that runs well (a
//     launch, an asynchronous copy, an event record, a query:
//     gpuwait.Wait.Momentary) counts only with the probes: one sample
//     cannot tell such a call waits. When the probes know it waits in a collective
//     (Facts.Collective) the activity is collective, its detail that
//     collective ("AllReduce #12 on comm 3f2a..."): the rank waits in
//     another communicator's collective, or in the one its peers are
//     in. Otherwise gpu-wait, its detail the wait and the oldest kernel
//     not known complete ("cuStreamSynchronize from
//     c10::cuda::device_synchronize, kernel flash_fwd").
//   - python: the thread has Python frames: it runs Python code, or
//     waits in a call the rules above do not know (time.sleep, a lock, a
//     socket). Detail: the innermost Python frame, func@file:line.
//   - unknown: anything else. Detail: the innermost native frame that is
//     neither the C runtimes' nor unnamed, when there is one.
//
// Python functions are compared by name without their class (dumps of
// CPython 3.11 and later may carry qualified names). A sample with no
// thread at all is unknown with no detail.
package activity
