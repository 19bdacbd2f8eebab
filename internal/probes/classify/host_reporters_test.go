package classify

import (
	"strings"
	"testing"
)

// Host memory from the reporters above the machine, with the reporter named
// in the reason; and their look-alikes.
func TestHostReporters(t *testing.T) {
	for _, tc := range []struct {
		log, kind, reason string
	}{
		{"ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n", "host_oom", "Ray's memory monitor"},
		{"(raylet) [2026-02-02 17:40:51] 1 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 7a0c, IP: 10.4.2.17) over the last time period.\n", "host_oom", "Ray's memory monitor"},
		{"ray.exceptions.RayOutOfMemoryError: More than 95% of the memory on node ip-10-0-0-5 is used (30.1 / 31.0 GB).\n", "host_oom", "Ray's memory monitor"},
		{"  Warning  Evicted  3m  kubelet  The node was low on resource: memory. Threshold quantity: 100Mi, available: 81244Ki.\n", "host_oom", "Kubernetes"},
		{"Feb 20 11:40:03 gpu-07 systemd-oomd[812]: Killed /user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope due to memory pressure for /user.slice/user-1000.slice being 62.51% > 50.00% for > 20s with reclaim activity\n", "host_oom", "systemd-oomd"},
		{"earlyoom[1021]: sending SIGTERM to process 4711 uid 1000 \"python\": badness 900, VmRSS 28123 MiB\n", "host_oom", "earlyoom"},
		{"Your session crashed after using all available RAM. If you are interested in access to high-RAM runtimes, you may want to check out Colab Pro.\n", "host_oom", "Colab"},
		{"OSError: [WinError 1455] The paging file is too small for this operation to complete. Error loading \"C:\\venv\\lib\\site-packages\\torch\\lib\\cudnn_cnn_infer64_8.dll\" or one of its dependencies.\n", "cpu_alloc_oom", "paging file"},
		{"ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory (message cut)\n", "host_oom", "Ray's memory monitor"},
		{"ray.exceptions.OutOfMemoryError: see the raylet's log\n", "host_oom", "Ray's memory monitor"},
		// Look-alikes.
		{"earlyoom v1.7: mem total: 64000 MiB, sending SIGTERM at <= 10.00%, SIGKILL at <= 5.00%\n", "none", ""},
		{"systemd-oomd[812]: Swap used (1.2G) / total (8G) is less than 90.00%: skipping\n", "none", ""},
		{"(raylet) 0 Workers (tasks / actors) killed due to memory pressure (OOM), 1 Workers crashed due to other reasons at node (ID: 7a0c).\n", "none", ""},
		{"  Warning  Evicted  3m  kubelet  The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi.\n", "none", ""},
		{"INFO: memory_usage_threshold=0.95, kill the task when the node is low on memory\n", "none", ""},
	} {
		v := classifyString(t, tc.log, ClassifierOptions{})
		if string(v.Kind) != tc.kind || !strings.Contains(v.Reason, tc.reason) {
			t.Errorf("%q: %s (%s), want %s naming %q", strings.TrimSpace(tc.log), v.Kind, v.Reason, tc.kind, tc.reason)
		}
	}
}
