package classify

// Host memory, from whoever killed the job. The kernel, the memory cgroup,
// Slurm, the container runtime and a shell are read in classify_failure.go;
// this file adds the user-space killers (systemd-oomd, earlyoom), hosted
// notebooks (Colab), and the reporters that stand above the machine: an
// orchestrator's memory monitor (Ray) and Kubernetes' eviction for memory
// pressure. Their exception may be called OutOfMemoryError and still be
// about host RAM: Ray's names no device, and says the node ran low.
//
// Each verdict's reason names the reporter, so that the advice (and the
// person reading it) goes to the right limit.

// hostReporterLine reads Ray's and the kubelet's reports of a kill for host
// memory.
func hostReporterLine(t []byte) (failure, bool) {
	switch {
	case bHas(t, "running low on memory") && (bHas(t, "OutOfMemoryError") || bHas(t, "killed")):
		// ray.exceptions.OutOfMemoryError: Task was killed due to the node
		// running low on memory. (Ray >= 2.2, python/ray/exceptions.py)
		f := memFailure(KindHostOOM, "killed for host memory by Ray's memory monitor (the node ran low on memory)", "ray")
		f.detail = "Ray's memory monitor kills the most recently scheduled task when the node's memory use passes memory_usage_threshold (0.95 by default)"
		return f, true
	case bHas(t, "RayOutOfMemoryError"):
		// Ray < 2.0: "ray.exceptions.RayOutOfMemoryError: More than 95% of
		// the memory on node ... is used".
		f := memFailure(KindHostOOM, "killed for host memory by Ray's memory monitor (RayOutOfMemoryError)", "ray")
		return f, true
	case bHas(t, "killed due to memory pressure (OOM)"):
		// The raylet's summary: "1 Workers (tasks / actors) killed due to
		// memory pressure (OOM), 0 Workers crashed due to other reasons".
		if i := bIndex(t, " Workers (tasks / actors) killed"); i > 0 && t[i-1] == '0' && (i == 1 || !asciiDigit(t[i-2])) {
			return failure{}, false // none killed
		}
		f := memFailure(KindHostOOM, "killed for host memory by Ray's memory monitor (workers killed due to memory pressure)", "ray")
		return f, true
	case bHas(t, "systemd-oomd") && bHas(t, "Killed "):
		// "systemd-oomd[812]: Killed /user.slice/.../app.slice/run-r1.scope
		// due to memory pressure for ... being 62.51% > 50.00% for > 20s"
		f := memFailure(KindHostOOM, "killed for host memory by systemd-oomd (memory pressure or swap use)", "systemd_oomd")
		if i := bIndex(t, " due to "); i >= 0 {
			f.detail = "systemd-oomd killed the unit" + clipText(string(trimSpace(t[i:])), 200)
		}
		return f, true
	case bHas(t, "earlyoom") && (bHas(t, "sending SIGTERM to process ") || bHas(t, "sending SIGKILL to process ")):
		// earlyoom: "earlyoom[1021]: sending SIGTERM to process 4711 uid
		// 1000 "python": badness 900, VmRSS 28123 MiB"
		f := memFailure(KindHostOOM, "killed for host memory by earlyoom (the machine ran low on memory)", "earlyoom")
		return f, true
	case bHas(t, "crashed after using all available RAM"):
		// Google Colab: "Your session crashed after using all available RAM."
		f := memFailure(KindHostOOM, "killed for host memory by Colab (the session used all available RAM)", "colab")
		return f, true
	case bHas(t, "low on resource: memory"):
		// The kubelet's eviction (pkg/kubelet/eviction/helpers.go):
		// "The node was low on resource: memory. Threshold quantity: 100Mi,
		// available: 81244Ki. Container trainer was using 61203312Ki, ..."
		f := memFailure(KindHostOOM, "evicted by Kubernetes for node memory pressure (the kubelet evicted the pod)", "k8s_eviction")
		if i := bIndex(t, "Container "); i >= 0 {
			f.detail = clipText(string(trimSpace(t[i:])), 200)
		}
		return f, true
	}
	return failure{}, false
}

// posixMemalign reads the CPU allocator's old enforce message, which has no
// memory word at all: "[enforce fail at CPUAllocator.cpp:65] .
// posix_memalign(&data, gAlignment, nbytes) == 0. 12 vs 0". c10's
// CAFFE_ENFORCE_EQ prints the call, then the two values compared: the first
// is posix_memalign's return, an errno; 12 is ENOMEM (22, EINVAL, is a bad
// alignment: not memory).
func posixMemalign(t []byte) (failure, bool) {
	i := bIndex(t, "posix_memalign(")
	if i < 0 {
		return failure{}, false
	}
	j := bIndex(t[i:], ") == 0. ")
	if j < 0 {
		return failure{}, false
	}
	v, n, ok := scanInt(t[i+j+len(") == 0. "):])
	if !ok || v != 12 || !bHasPrefix(t[i+j+len(") == 0. ")+n:], " vs 0") {
		return failure{}, false
	}
	at := i
	if k := bIndex(t, "[enforce fail"); k >= 0 && k < i {
		at = k
	}
	f := memFailure(KindCPUAllocOOM, "host memory allocation failed (PyTorch CPU allocator: posix_memalign returned ENOMEM)", "cpu")
	f.oom = &OOM{Format: "cpu_allocator_errno", Exception: exceptionBefore(t, at)}
	f.detail = "posix_memalign returned 12 (ENOMEM): the process could not get more host memory"
	return f, true
}
