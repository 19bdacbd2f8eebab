// Package procfs reads /proc and the cgroup file system: a process's stat
// (ParseStat, ReadStat: the one parser), the job's processes by gpuguard's
// membership rule (Tree, ProcessList: used both to stop the job and to
// measure it), cgroup v1 and v2 memory limits and OOM-kill counts
// (ReadCgroup), and the host memory of the job's processes (HostReader).
package procfs
