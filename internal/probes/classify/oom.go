package classify

// Parsers for the figures that out-of-memory messages print. Each works on the
// message text (one line, or a message joined back from hard-wrapped lines),
// finds its clauses by their fixed words wherever they are, and leaves a field
// nil when the message does not print it. None of them allocates more than the
// OOM they fill in.

import "bytes"

// oomExtra holds figures a message prints that have no field in OOM; the
// diagnosis mentions them.
type oomExtra struct {
	allowed     *int64 // PyTorch "X allowed;" (per-process memory fraction)
	mpsOther    *int64 // MPS "other allocations: X"
	mpsMax      *int64 // MPS "max allowed: X"
	allocator   string // TensorFlow "by allocator GPU_0_bfc"
	tfShape     string // TensorFlow "shape[32,1088,17,17]"
	tfType      string // TensorFlow "type float"
	xlaReserved *int64 // XLA "Z reserved"
}

// parseTorchOOM fills o from a PyTorch device OOM message: msg starts at the
// back-end word ("CUDA out of memory. Tried to allocate ...", "HIP ...",
// "XPU ...") or at "Current platform can NOT allocate ...". It returns whether
// the message looks complete (a hard-wrapped message continues on the next
// line).
func parseTorchOOM(msg []byte, o *OOM, x *oomExtra) (complete bool) {
	backend := ""
	switch {
	case bHasPrefix(msg, "HIP"):
		backend = "_hip"
	case bHasPrefix(msg, "XPU"), bHasPrefix(msg, "Current platform"):
		backend = "_xpu"
	}
	if v, ok := memSizeAfter(msg, "Tried to allocate "); ok {
		o.RequestedBytes = valPtr(v)
	}
	capAt := bIndex(msg, " has a total capacity of ")
	capLen := len(" has a total capacity of ")
	if capAt < 0 {
		capAt = bIndex(msg, " has a total capacty of ") // 2.1-era typo
		capLen = len(" has a total capacty of ")
	}
	paren := -1
	if ta := bIndex(msg, "Tried to allocate "); ta >= 0 {
		if p := bytes.IndexByte(msg[ta:], '('); p >= 0 && p < 40 {
			paren = ta + p
		}
	}
	switch {
	case capAt >= 0:
		o.Format = "modern" + backend
		complete = parseModernClauses(msg, o, x, capAt, capLen)
	case paren >= 0:
		o.Format = "old" + backend
		complete = parseOldParen(msg[paren+1:], o, x)
	default:
		o.Format = "modern" + backend
		// "Tried to allocate X." and nothing else yet: wrapped, or cut.
		complete = false
	}
	deriveReserved(o)
	return complete
}

// parseModernClauses reads the current message's sentences, each by its
// own words ("GPU 0 has a total capacity of X of which Y is free.", "this
// process has X memory in use", "Process N has X memory in use", "Of the
// allocated memory X is allocated by PyTorch", "X is reserved by PyTorch but
// unallocated"); capAt is where " has a total capacity of " (capLen long)
// starts. It returns whether the message looks complete.
func parseModernClauses(msg []byte, o *OOM, x *oomExtra, capAt, capLen int) bool {
	// The device: the words between the previous ". " and " has".
	d := bytes.LastIndex(msg[:capAt], []byte(". "))
	if d >= 0 && capAt-(d+2) > 0 && capAt-(d+2) <= 32 {
		o.Device = valPtr(string(msg[d+2 : capAt]))
	}
	if v, _, ok := parseMemSize(msg[capAt+capLen:]); ok {
		o.TotalBytes = valPtr(v)
	}
	if v, ok := memSizeAfter(msg, "of which "); ok {
		o.FreeBytes = valPtr(v)
	}
	if v, ok := memSizeAfter(msg, "this process has "); ok {
		o.InUseBytes = valPtr(v)
	}
	o.OtherProcesses = o.OtherProcesses[:0]
	for off := 0; off < len(msg); {
		i := bIndex(msg[off:], "Process ")
		if i < 0 {
			break
		}
		i += off
		off = i + len("Process ")
		pid, n, ok := scanInt(msg[off:])
		if !ok || !asciiDigit(msg[off]) || !bHasPrefix(msg[off+n:], " has ") {
			continue
		}
		v, m, ok := parseMemSize(msg[off+n+len(" has "):])
		if !ok || !bHasPrefix(msg[off+n+len(" has ")+m:], " memory in use") {
			continue
		}
		o.OtherProcesses = append(o.OtherProcesses, ProcUse{PID: int(pid), Bytes: v})
	}
	if len(o.OtherProcesses) == 0 {
		o.OtherProcesses = nil
	}
	if i := bIndex(msg, " allowed;"); i >= 0 {
		if v, _, ok := memSizeBefore(msg, i); ok {
			x.allowed = valPtr(v)
		}
	}
	if v, ok := memSizeAfter(msg, "Of the allocated memory "); ok {
		o.AllocatedBytes = valPtr(v)
	}
	if i := bIndex(msg, " allocated in private pools"); i >= 0 {
		if v, _, ok := memSizeBefore(msg, i); ok {
			o.PrivatePoolsBytes = valPtr(v)
		}
	}
	if i := bIndex(msg, " is reserved by PyTorch but unallocated"); i >= 0 {
		if v, _, ok := memSizeBefore(msg, i); ok {
			o.ReservedUnallocatedBytes = valPtr(v)
		}
	}
	return bHas(msg, "but unallocated") || bHas(msg, "See documentation") || bHas(msg, "empty_cache")
}

// parseOldParen reads the old message's parenthesis, rest being the text
// after its '(': "GPU 0; X total capacity; X already allocated; X free; X
// reserved in total by PyTorch)", clause by clause. It returns whether the
// parenthesis closed.
func parseOldParen(rest []byte, o *OOM, x *oomExtra) bool {
	body := rest
	end := bytes.IndexByte(body, ')')
	complete := end >= 0
	if end >= 0 {
		body = body[:end]
	}
	for len(body) > 0 {
		var cl []byte
		if k := bytes.IndexByte(body, ';'); k >= 0 {
			cl, body = body[:k], body[k+1:]
		} else {
			cl, body = body, nil
		}
		cl = trimSpace(cl)
		if bHasPrefix(cl, "GPU") {
			o.Device = valPtr(string(cl))
			continue
		}
		v, _, ok := parseMemSize(cl)
		if !ok {
			continue
		}
		switch {
		case bHas(cl, "total capacity"):
			o.TotalBytes = valPtr(v)
		case bHas(cl, "already allocated"):
			o.AllocatedBytes = valPtr(v)
		case bHas(cl, "reserved in total"):
			o.ReservedTotalBytes = valPtr(v)
		case bHas(cl, "cached"):
			o.ReservedUnallocatedBytes = valPtr(v)
		case bHas(cl, "allowed"):
			x.allowed = valPtr(v)
		case bHas(cl, "free"):
			o.FreeBytes = valPtr(v)
		}
	}
	return complete
}

// deriveReserved fills the reserved figure the message did not print from the
// other two: reserved in total = allocated + reserved but unallocated. (The
// old message prints the total, the current one the unallocated part, the
// oldest one "cached", which PyTorch computed as the unallocated part.)
func deriveReserved(o *OOM) {
	if o.AllocatedBytes == nil {
		return
	}
	switch {
	case o.ReservedTotalBytes != nil && o.ReservedUnallocatedBytes == nil:
		if d := *o.ReservedTotalBytes - *o.AllocatedBytes; d >= 0 {
			o.ReservedUnallocatedBytes = valPtr(d)
		}
	case o.ReservedUnallocatedBytes != nil && o.ReservedTotalBytes == nil:
		o.ReservedTotalBytes = valPtr(*o.AllocatedBytes + *o.ReservedUnallocatedBytes)
	}
}

// parseMPSOOM reads "MPS backend out of memory (MPS allocated: X, other
// allocations: Y, max allowed: Z). Tried to allocate W on private pool."
func parseMPSOOM(msg []byte, o *OOM, x *oomExtra) {
	o.Format = "mps"
	o.Device = valPtr("MPS")
	if v, ok := memSizeAfter(msg, "MPS allocated:"); ok {
		o.AllocatedBytes = valPtr(v)
	}
	if v, ok := memSizeAfter(msg, "other allocations:"); ok {
		x.mpsOther = valPtr(v)
	}
	if v, ok := memSizeAfter(msg, "max allowed:"); ok {
		x.mpsMax = valPtr(v)
	}
	if v, ok := memSizeAfter(msg, "Tried to allocate "); ok {
		o.RequestedBytes = valPtr(v)
	}
}

// parseXLAOOM reads JAX/XLA's RESOURCE_EXHAUSTED allocation failures.
func parseXLAOOM(msg []byte, o *OOM, x *oomExtra) {
	o.Format = "xla_resource_exhausted"
	for _, key := range [...]string{"while trying to allocate ", "Failed to allocate request for ", "Attempting to reserve ", "Attempting to allocate ", "Out of memory allocating "} {
		if v, ok := memSizeAfter(msg, key); ok {
			o.RequestedBytes = valPtr(v)
			break
		}
	}
	if i := bIndex(msg, "on device ordinal "); i >= 0 {
		j := i + len("on device ordinal ")
		_, n, ok := scanInt(msg[j:])
		if ok && asciiDigit(msg[j]) {
			o.Device = valPtr(string(msg[i+len("on ") : j+n]))
		}
	}
	if i := bIndex(msg, "There are "); i >= 0 {
		if v, ok := memSizeAfter(msg[i:], "There are "); ok && bHas(msg[i:], " free") {
			o.FreeBytes = valPtr(v)
		}
		if j := bIndex(msg[i:], " reserved,"); j >= 0 {
			if v, _, ok := memSizeBefore(msg[i:], j); ok {
				x.xlaReserved = valPtr(v)
			}
		}
	}
	// TPU: "Ran out of memory in memory space hbm. Used 20.5G of 15.48G hbm."
	if i := bIndex(msg, "Used "); i >= 0 && bHas(msg, " hbm") {
		r := msg[i+len("Used "):]
		if v, n, ok := parseMemSize(r); ok {
			o.InUseBytes = valPtr(v)
			if bHasPrefix(r[n:], " of ") {
				if t, _, ok := parseMemSize(r[n+len(" of "):]); ok {
					o.TotalBytes = valPtr(t)
				}
			}
		}
	}
}

// tfDTypeSize is the element size of a TensorFlow dtype as OOM messages name
// it ("type float").
func tfDTypeSize(t string) int64 {
	switch t {
	case "bool", "int8", "uint8", "qint8", "quint8":
		return 1
	case "half", "bfloat16", "int16", "uint16", "float16":
		return 2
	case "float", "int32", "uint32", "float32", "qint32":
		return 4
	case "double", "int64", "uint64", "complex64", "float64":
		return 8
	case "complex128":
		return 16
	}
	return 0
}

// parseTFOOM reads "OOM when allocating tensor with shape[32,1088,17,17] and
// type float on /job:localhost/replica:0/task:0/device:GPU:1 by allocator
// GPU_1_bfc". TensorFlow prints a shape, not a size: the requested size is
// the shape's element count times the element size.
func parseTFOOM(msg []byte, o *OOM, x *oomExtra) {
	o.Format = "tf_oom_tensor"
	i := bIndex(msg, "shape[")
	if i >= 0 {
		j := bytes.IndexByte(msg[i:], ']')
		if j > 0 {
			x.tfShape = string(msg[i : i+j+1])
			dims := msg[i+len("shape[") : i+j]
			count := int64(1)
			ok := len(dims) > 0
			for _, d := range bytes.Split(dims, []byte(",")) {
				v, n, good := scanInt(trimSpace(d))
				if !good || n != len(trimSpace(d)) || v < 0 || (v > 0 && count > (1<<62)/v) {
					ok = false
					break
				}
				count *= v
			}
			rest := msg[i+j+1:]
			if k := bIndex(rest, " type "); k >= 0 && k < 8 {
				tp := rest[k+len(" type "):]
				e := 0
				for e < len(tp) && (asciiLetter(tp[e]) || asciiDigit(tp[e])) {
					e++
				}
				x.tfType = string(tp[:e])
				if sz := tfDTypeSize(x.tfType); ok && sz > 0 && count <= (1<<62)/sz {
					o.RequestedBytes = valPtr(count * sz)
				}
			}
		}
	}
	if k := bIndex(msg, " on /"); k >= 0 {
		d := msg[k+len(" on "):]
		e := bytes.IndexByte(d, ' ')
		if e < 0 {
			e = len(d)
		}
		o.Device = valPtr(string(d[:e]))
	} else if k := bIndex(msg, " on gpu"); k >= 0 {
		d := msg[k+len(" on "):]
		e := bytes.IndexByte(d, ' ')
		if e < 0 {
			e = len(d)
		}
		o.Device = valPtr(string(d[:e]))
	}
	if k := bIndex(msg, "by allocator "); k >= 0 {
		a := msg[k+len("by allocator "):]
		e := 0
		for e < len(a) && a[e] != ' ' && a[e] != '\t' {
			e++
		}
		x.allocator = string(a[:e])
	}
}

// parseAllowedTable reads the lines that follow "Allocation on device N would
// exceed allowed memory" when PyTorch's native allocator raised it:
//
//	Currently allocated     : 4.68 GiB
//	Requested               : 1.14 GiB
//	Device limit            : 23.68 GiB
//	Free (according to CUDA): 16.56 MiB
func parseAllowedTable(t []byte, o *OOM) bool {
	t = trimSpaceLeft(t)
	c := bytes.IndexByte(t, ':')
	if c < 0 {
		return false
	}
	v, _, ok := parseMemSize(trimSpaceLeft(t[c+1:]))
	if !ok {
		return false
	}
	key := trimSpace(t[:c])
	switch {
	case bHasPrefix(key, "Currently allocated"):
		o.AllocatedBytes = valPtr(v)
	case bHasPrefix(key, "Requested"):
		o.RequestedBytes = valPtr(v)
	case bHasPrefix(key, "Device limit"):
		o.TotalBytes = valPtr(v)
	case bHasPrefix(key, "Free (according to CUDA)"):
		o.FreeBytes = valPtr(v)
	default:
		return false
	}
	return true
}

// exceptionBefore returns the Python exception type printed before index at
// in t ("torch.OutOfMemoryError: CUDA out of memory", "ResourceExhaustedError
// (see above for traceback): OOM when ..."), or "".
func exceptionBefore(t []byte, at int) string {
	if at <= 0 || at > len(t) {
		return ""
	}
	head := t[:at]
	for k := 0; k < 3; k++ {
		i := bytes.LastIndex(head, []byte("Error"))
		j := bytes.LastIndex(head, []byte("Exception"))
		end := -1
		switch {
		case i >= 0 && (j < 0 || i > j):
			end = i + len("Error")
		case j >= 0:
			end = j + len("Exception")
		}
		if end < 0 {
			return ""
		}
		after := head[end:]
		if bHasPrefix(after, ":") || bHasPrefix(after, " (see above for traceback):") {
			if name := identBefore(t, end); name != "" {
				return name
			}
		}
		head = head[:end-1]
	}
	return ""
}

// identBefore returns the dotted identifier that ends at index end of t, or ""
// when it does not start at a token boundary.
func identBefore(t []byte, end int) string {
	s := end
	for s > 0 {
		c := t[s-1]
		if asciiLetter(c) || asciiDigit(c) || c == '_' || c == '.' {
			s--
			continue
		}
		break
	}
	if s == end || !asciiLetter(t[s]) && t[s] != '_' {
		return ""
	}
	return exceptionName(string(t[s:end]))
}
