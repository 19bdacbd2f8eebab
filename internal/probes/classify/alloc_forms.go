package classify

// More allocation failures that name a device's memory in their own words.

// allocFormLine reads:
//
//   - XLA's INTERNAL allocation failure, which is memory all the same:
//     "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to allocate
//     1073741824 bytes for new constant" (format xla_failed_to_allocate);
//   - CuPy's allocator: "cupy.cuda.memory.OutOfMemoryError: Out of memory
//     allocating 1,073,741,824 bytes (allocated so far: 15,032,385,536
//     bytes)." (format cupy), its counts grouped by commas;
//   - DataParallel's report of a replica's OOM: "RuntimeError: Caught
//     OutOfMemoryError in replica 0 on device 0." (format
//     caught_in_replica), whose original message, when it follows, gives
//     the figures (Classifier.merge);
//   - PaddlePaddle's allocator (paddle/fluid/memory/allocation/
//     cuda_allocator.cc, and its XPU, NPU and custom-device twins): "Out of
//     memory error on GPU 0. Cannot allocate 400.000244MB memory on GPU 0,
//     7.288696GB memory has been allocated and available memory is only
//     155.187500MB." (format paddle; 1.x leaves out what has been
//     allocated). Sizes are HumanReadableSize's "%f" and a binary unit.
func allocFormLine(t []byte) (failure, bool) {
	switch {
	case bHas(t, "INTERNAL: Failed to allocate ") && !bHas(t, "RESOURCE_EXHAUSTED"):
		i := bIndex(t, "Failed to allocate ")
		f, o := gpuOOM(t, bIndex(t, "INTERNAL"), "xla_failed_to_allocate")
		f.reason = "XLA out of memory (failed to allocate)"
		if v, n, ok := scanInt(t[i+len("Failed to allocate "):]); ok && bHasPrefix(t[i+len("Failed to allocate ")+n:], " bytes") {
			o.RequestedBytes = valPtr(v)
		}
		return f, true
	case bHas(t, "Out of memory allocating ") && bHas(t, "allocated so far: "):
		i := bIndex(t, "Out of memory allocating ")
		f, o := gpuOOM(t, i, "cupy")
		f.reason = "GPU out of memory (CuPy)"
		if v, ok := groupedBytes(t[i+len("Out of memory allocating "):]); ok {
			o.RequestedBytes = valPtr(v)
		}
		if v, ok := groupedBytes(t[bIndex(t, "allocated so far: ")+len("allocated so far: "):]); ok {
			o.AllocatedBytes = valPtr(v)
		}
		return f, true
	case bHas(t, "Out of memory error on ") && bHas(t, "Cannot allocate "):
		return paddleOOM(t)
	case bHas(t, "Caught OutOfMemoryError in replica "):
		i := bIndex(t, "Caught OutOfMemoryError in replica ")
		f, o := gpuOOM(t, i, "caught_in_replica")
		f.reason = "GPU out of memory (in a DataParallel replica)"
		if j := bIndex(t[i:], " on device "); j >= 0 {
			if v, _, ok := scanInt(t[i+j+len(" on device "):]); ok {
				d := "device " + itoa(v)
				o.Device = &d
			}
		}
		return f, true
	}
	return failure{}, false
}

// groupedBytes reads "1,073,741,824 bytes": digits grouped by commas, then
// " bytes".
func groupedBytes(b []byte) (int64, bool) {
	var v int64
	i, digits := 0, 0
	for i < len(b) && (asciiDigit(b[i]) || b[i] == ',' && i > 0 && i+1 < len(b) && asciiDigit(b[i+1])) {
		if b[i] != ',' {
			if digits > 18 {
				return 0, false
			}
			v = v*10 + int64(b[i]-'0')
			digits++
		}
		i++
	}
	if digits == 0 || !bHasPrefix(b[i:], " bytes") {
		return 0, false
	}
	return v, true
}

// paddleOOM reads PaddlePaddle's allocator message (see allocFormLine).
func paddleOOM(t []byte) (failure, bool) {
	i := bIndex(t, "Out of memory error on ")
	f, o := gpuOOM(t, i, "paddle")
	f.reason = "GPU out of memory (PaddlePaddle allocator)"
	o.Exception = ""
	r := t[i+len("Out of memory error on "):]
	// "GPU 0." / "XPU 1." / "npu 3.": the device's name and number.
	if k := bIndex(r, " "); k > 0 && k < 16 {
		if v, n, ok := scanInt(r[k+1:]); ok && k+1+n < len(r) && r[k+1+n] == '.' {
			d := string(r[:k]) + " " + itoa(v)
			o.Device = &d
		}
	}
	if k := bIndex(r, "Cannot allocate "); k >= 0 {
		if v, _, ok := parseMemSize(r[k+len("Cannot allocate "):]); ok {
			o.RequestedBytes = valPtr(v)
		}
	}
	if k := bIndex(r, " memory has been allocated"); k >= 0 {
		// ", 7.288696GB memory has been allocated": the size after the comma.
		j := k
		for j > 0 && r[j-1] != ' ' {
			j--
		}
		if v, _, ok := parseMemSize(r[j:k]); ok {
			o.AllocatedBytes = valPtr(v)
		}
	}
	if k := bIndex(r, "available memory is only "); k >= 0 {
		if v, _, ok := parseMemSize(r[k+len("available memory is only "):]); ok {
			o.FreeBytes = valPtr(v)
		}
	} else if k := bIndex(r, "available memory is "); k >= 0 {
		if v, _, ok := parseMemSize(r[k+len("available memory is "):]); ok {
			o.FreeBytes = valPtr(v)
		}
	}
	return f, true
}
