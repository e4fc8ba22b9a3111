"""A stub of the parts of torch that the strata_torch package touches, for testing it
where PyTorch with CUDA cannot be installed. It records what strata_torch
does to it."""


class _Handle:
    """What torch._C._cuda_customAllocator returns: the hook setters."""

    def __init__(self):
        self.hooks = {}

    def _setter(name):
        def set_hook(self, address):
            self.hooks[name] = address
        return set_hook

    set_init_fn = _setter("set_init_fn")
    set_reset_fn = _setter("set_reset_fn")
    set_memory_fraction_fn = _setter("set_memory_fraction_fn")
    set_record_stream_fn = _setter("set_record_stream_fn")


class CUDAPluggableAllocator:
    def __init__(self, path, alloc_fn_name, free_fn_name):
        self.path = path
        self.alloc_fn_name = alloc_fn_name
        self.free_fn_name = free_fn_name
        self._allocator = _Handle()


class _Memory:
    CUDAPluggableAllocator = CUDAPluggableAllocator

    def __init__(self):
        self.current = None

    def change_current_allocator(self, allocator):
        self.current = allocator


class OutOfMemoryError(RuntimeError):
    pass


class _Cuda:
    OutOfMemoryError = OutOfMemoryError

    def __init__(self):
        self.initialized = False
        self.memory = _Memory()

    def is_initialized(self):
        return self.initialized

    def current_device(self):
        return 0


cuda = _Cuda()
