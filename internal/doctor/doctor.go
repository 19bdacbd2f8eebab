// Package doctor implements `gpuguard doctor`: what stands between a job and
// the memory it needs before it starts. It lists the machine's GPUs (through
// NVML, when this build has it and a driver answers), the processes holding
// their memory and whether each is a leftover of a gpuguard run, host and
// cgroup memory, the Slurm context, and the allocator settings of the
// environment.
package doctor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/user"
	"sort"
	"strconv"
	"strings"

	"github.com/gpuguard/gpuguard/internal/envlist"
	"github.com/gpuguard/gpuguard/internal/exitcode"
	"github.com/gpuguard/gpuguard/internal/humanize"
	"github.com/gpuguard/gpuguard/internal/probes/procfs"
	"github.com/gpuguard/gpuguard/internal/probes/slurmenv"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// busyFraction: doctor exits 1 when a GPU the job will use already has more
// than this share of its memory in use (by others: the job has not started).
const busyFraction = 0.5

// Options are the inputs of `gpuguard doctor`.
type Options struct {
	JSON   bool // print the report as JSON
	Stdout io.Writer
}

// report is what doctor found; `gpuguard doctor --json` prints it.
type report struct {
	NVML      gpuFacts           `json:"nvml"`
	Host      *procfs.HostSample `json:"host,omitempty"`
	HostError string             `json:"host_error,omitempty"`
	// Slurm is null outside a Slurm job.
	Slurm *slurmenv.Context `json:"slurm"`
	// Env holds the allocator and device-selection variables that are set.
	Env map[string]string `json:"env"`
	// AllocConf lists what PyTorch would reject in the allocator variables
	// (allocConfVars): the reason doctor exits 78.
	AllocConf []string `json:"allocator_problems"`
	// Busy lists the GPUs the job will use that are already mostly taken:
	// the reason doctor exits 1.
	Busy []string `json:"busy"`
}

// gpuFacts is what NVML says about the machine's GPUs.
type gpuFacts struct {
	Available   bool     `json:"available"`
	Why         string   `json:"why,omitempty"` // why NVML is not available
	Driver      string   `json:"driver,omitempty"`
	NVMLVersion string   `json:"nvml_version,omitempty"`
	CUDADriver  string   `json:"cuda_driver,omitempty"` // "12.4"
	GPUs        []device `json:"gpus"`                  // [] when none
}

// device is one physical GPU.
type device struct {
	Index      int     `json:"index"`
	UUID       string  `json:"uuid"`
	Name       string  `json:"name"`
	TotalBytes uint64  `json:"total_bytes"`
	UsedBytes  uint64  `json:"used_bytes"` // total minus free
	UsedFrac   float64 `json:"used_fraction"`
	// MIG is "enabled", "disabled" or "" (not supported).
	MIG        string      `json:"mig,omitempty"`
	MIGDevices []migDevice `json:"mig_devices"`
	// JobWillUse: CUDA_VISIBLE_DEVICES (of doctor's environment) selects it.
	JobWillUse bool      `json:"job_will_use"`
	Processes  []process `json:"processes"`
	Error      string    `json:"error,omitempty"`
}

// migDevice is one MIG device of a GPU.
type migDevice struct {
	UUID       string `json:"uuid"`
	TotalBytes uint64 `json:"total_bytes"`
	UsedBytes  uint64 `json:"used_bytes"`
	JobWillUse bool   `json:"job_will_use"`
}

// process is a process holding GPU memory.
type process struct {
	PID       int    `json:"pid"`
	UsedBytes uint64 `json:"used_bytes,omitempty"` // 0 when NVML does not say
	User      string `json:"user,omitempty"`
	Command   string `json:"command,omitempty"`
	// Visible: the process exists in this PID namespace (NVML reports host
	// PIDs; in a container they may lead nowhere).
	Visible bool `json:"visible"`
	// GpuguardPID, RunDir and Attempt come from the process's environment
	// (GPUGUARD_PID, GPUGUARD_RUN_DIR, GPUGUARD_ATTEMPT), when it was
	// started by gpuguard and its environment is readable.
	GpuguardPID int    `json:"gpuguard_pid,omitempty"`
	RunDir      string `json:"run_dir,omitempty"`
	Attempt     string `json:"attempt,omitempty"`
	// Stale: the process belongs to a gpuguard run that is over (its
	// gpuguard is gone) or it was orphaned (reparented to init or a
	// subreaper other than its gpuguard). Status says which, in words.
	Stale  bool   `json:"stale"`
	Status string `json:"status"`
}

// allocatorVars are the variables doctor reports when set.
var allocatorVars = []string{
	"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING",
	"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES", "TF_FORCE_GPU_ALLOW_GROWTH",
	"XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION",
}

// inputs are the seams of doctor: the proc root, the environment, and the
// GPU facts (NVML, or a mock in tests).
type inputs struct {
	procRoot string
	env      []string
	selfPID  int
	gpus     func(env []string, procRoot string) gpuFacts
}

// Command runs `gpuguard doctor`. Its error carries exit status 78
// (exitcode.Config) when an allocator variable holds what PyTorch would
// reject (a misspelt option, a value it does not take), else 1
// (exitcode.Busy) when a GPU the job will use (CUDA_VISIBLE_DEVICES of this
// environment) already has more than half of its memory in use, the output
// having said so; there is none when there is no GPU or NVML cannot be used
// (the output says why, and that `gpuguard run` works all the same). Its
// JSON has every key always: empty lists for none, null for no Slurm job.
func Command(o Options) error {
	return run(o, inputs{procRoot: "/proc", env: os.Environ(), selfPID: os.Getpid(), gpus: nvmlFacts})
}

func run(o Options, in inputs) error {
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	rep := report{Env: map[string]string{}, AllocConf: []string{}, Busy: []string{}}
	rep.NVML = in.gpus(in.env, in.procRoot)
	if rep.NVML.GPUs == nil {
		rep.NVML.GPUs = []device{}
	}
	for i := range rep.NVML.GPUs {
		g := &rep.NVML.GPUs[i]
		if g.Processes == nil {
			g.Processes = []process{}
		}
		if g.MIGDevices == nil {
			g.MIGDevices = []migDevice{}
		}
		for j := range g.Processes {
			describeProcess(in.procRoot, &g.Processes[j])
		}
		if g.JobWillUse && g.UsedFrac > busyFraction {
			rep.Busy = append(rep.Busy, fmt.Sprintf("GPU %d (%s) already has %s of %s in use (%.0f%%)", g.Index, g.UUID,
				humanize.Bytes(g.UsedBytes), humanize.Bytes(g.TotalBytes), 100*g.UsedFrac))
		}
		for _, m := range g.MIGDevices {
			if m.JobWillUse && m.TotalBytes > 0 && float64(m.UsedBytes) > busyFraction*float64(m.TotalBytes) {
				rep.Busy = append(rep.Busy, fmt.Sprintf("MIG device %s of GPU %d already has %s of %s in use", m.UUID, g.Index,
					humanize.Bytes(m.UsedBytes), humanize.Bytes(m.TotalBytes)))
			}
		}
	}
	if h, err := procfs.ReadHost(in.procRoot, in.selfPID); err != nil {
		rep.HostError = err.Error()
	} else {
		h.Processes, h.Workers, h.RSSBytes, h.PSSBytes, h.PSSComplete = 0, 0, 0, 0, false // doctor's own tree is not the point
		rep.Host = &h
	}
	if s := slurmenv.FromEnv(in.env); s.InSlurm() {
		rep.Slurm = &s
	}
	for _, k := range allocatorVars {
		if v, ok := envlist.Lookup(in.env, k); ok {
			rep.Env[k] = v
		}
	}
	for _, k := range allocConfVars {
		if v, ok := envlist.Lookup(in.env, k); ok {
			rep.AllocConf = append(rep.AllocConf, allocConfProblems(k, v)...)
		}
	}
	if o.JSON {
		enc := json.NewEncoder(o.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return &exitcode.Error{Code: exitcode.CantCreate, Err: err, Msg: fmt.Sprintf("writing JSON: %v", err)}
		}
	} else {
		writeText(o.Stdout, &rep)
	}
	switch {
	case len(rep.AllocConf) > 0:
		return exitcode.Status(exitcode.Config)
	case len(rep.Busy) > 0:
		return exitcode.Status(exitcode.Busy)
	}
	return nil
}

// describeProcess fills in who a GPU process is and whether it is stale.
func describeProcess(procRoot string, p *process) {
	dir := procRoot + "/" + strconv.Itoa(p.PID)
	if _, err := os.Stat(dir); err != nil {
		p.Status = "not visible here (NVML reports host PIDs: another PID namespace, or it just exited)"
		return
	}
	p.Visible = true
	if b, err := os.ReadFile(dir + "/cmdline"); err == nil {
		p.Command = strings.TrimSpace(strings.ReplaceAll(string(bytes.TrimRight(b, "\x00")), "\x00", " "))
	}
	p.User = procUser(dir)
	ppid := procPPID(procRoot, p.PID)
	env, envErr := os.ReadFile(dir + "/environ")
	if envErr == nil {
		vars := strings.Split(string(env), "\x00")
		p.GpuguardPID, _ = strconv.Atoi(envlist.Get(vars, record.EnvPID))
		p.RunDir = envlist.Get(vars, record.EnvRunDir)
		p.Attempt = envlist.Get(vars, record.EnvAttempt)
	}
	switch {
	case p.GpuguardPID > 0:
		run := ""
		if p.RunDir != "" {
			run = " of run " + p.RunDir
		}
		if p.Attempt != "" {
			run += " (attempt " + p.Attempt + ")"
		}
		if _, err := os.Stat(procRoot + "/" + strconv.Itoa(p.GpuguardPID)); err != nil {
			p.Stale = true
			p.Status = fmt.Sprintf("stale: started by gpuguard (pid %d)%s, which is gone; kill it to free the memory", p.GpuguardPID, run)
			return
		}
		if !hasAncestor(procRoot, p.PID, p.GpuguardPID) {
			p.Stale = true
			p.Status = fmt.Sprintf("stale: started by gpuguard (pid %d)%s but orphaned (its parent is now pid %d); kill it to free the memory",
				p.GpuguardPID, run, ppid)
			return
		}
		p.Status = fmt.Sprintf("live: under gpuguard (pid %d)%s", p.GpuguardPID, run)
	case envErr != nil:
		p.Status = "not known whether started by gpuguard (its environment is not readable: another user's process?)"
		if ppid == 1 {
			p.Status += "; orphaned (its parent is init)"
		}
	default:
		p.Status = "not started by gpuguard"
		if ppid == 1 {
			p.Status += "; orphaned (its parent is init): a leftover of a killed job?"
		}
	}
}

// procPPID reads the parent PID (0 when unknown).
func procPPID(procRoot string, pid int) int {
	st, err := procfs.ReadStat(procRoot, pid)
	if err != nil {
		return 0
	}
	return st.PPID
}

// hasAncestor says whether anc is an ancestor of pid.
func hasAncestor(procRoot string, pid, anc int) bool {
	for i := 0; i < 512 && pid > 1; i++ {
		pid = procPPID(procRoot, pid)
		if pid == anc {
			return true
		}
	}
	return false
}

// procUser names the owner of a process (its real UID).
func procUser(dir string) string {
	b, err := os.ReadFile(dir + "/status")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Uid:") {
			f := strings.Fields(line[4:])
			if len(f) == 0 {
				return ""
			}
			if u, err := user.LookupId(f[0]); err == nil {
				return u.Username
			}
			return "uid " + f[0]
		}
	}
	return ""
}

// runWithoutGPU is what doctor says where it finds no GPU to sample.
const runWithoutGPU = "  gpuguard run works without a GPU all the same: it runs the job, keeps its log, and recognises and recovers\n" +
	"  out-of-memory failures from the job's output; only the GPU memory samples (report's plot, peaks) are missing"

// writeText prints the report for people.
func writeText(w io.Writer, r *report) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	if !r.NVML.Available {
		p("GPUs: not available: %s", r.NVML.Why)
		p("%s", runWithoutGPU)
	} else {
		p("GPUs: driver %s, CUDA %s, NVML %s", orDash(r.NVML.Driver), orDash(r.NVML.CUDADriver), orDash(r.NVML.NVMLVersion))
		if len(r.NVML.GPUs) == 0 {
			p("  NVML lists no GPU")
			p("%s", runWithoutGPU)
		}
		for _, g := range r.NVML.GPUs {
			use := "      "
			if g.JobWillUse {
				use = "[job] "
			}
			line := fmt.Sprintf("  %s%d  %s  %s of %s in use (%.0f%%)", use, g.Index, g.Name, humanize.Bytes(g.UsedBytes),
				humanize.Bytes(g.TotalBytes), 100*g.UsedFrac)
			if g.MIG != "" {
				line += "  MIG " + g.MIG
			}
			p("%s", line)
			p("        %s", g.UUID)
			if g.Error != "" {
				p("        error: %s", g.Error)
			}
			for _, m := range g.MIGDevices {
				mark := ""
				if m.JobWillUse {
					mark = " [job]"
				}
				p("        MIG %s: %s of %s in use%s", m.UUID, humanize.Bytes(m.UsedBytes), humanize.Bytes(m.TotalBytes), mark)
			}
			for _, pr := range g.Processes {
				mem := "?"
				if pr.UsedBytes > 0 {
					mem = humanize.Bytes(pr.UsedBytes)
				}
				p("        pid %d  %s  %s  %s", pr.PID, mem, orDash(pr.User), shorten(orDash(pr.Command), 100))
				p("          %s", pr.Status)
			}
		}
	}
	if r.Host != nil {
		h := r.Host
		p("Host memory: %s available of %s", humanize.Bytes(h.MemAvailableBytes), humanize.Bytes(h.MemTotalBytes))
		if cg := h.Cgroup; cg != nil {
			limit := "no limit"
			if cg.LimitBytes > 0 {
				limit = "limit " + humanize.Bytes(cg.LimitBytes)
			}
			kills := "not readable"
			if cg.OOMKillsKnown {
				kills = strconv.FormatUint(cg.OOMKills, 10)
			}
			p("  memory cgroup (v%d) %s: %s, %s in use (%s working set), OOM kills so far: %s", cg.Version, cg.Path, limit,
				humanize.Bytes(cg.UsageBytes), humanize.Bytes(cg.WorkingSetBytes), kills)
		} else if h.CgroupErr != "" {
			p("  memory cgroup: %s", h.CgroupErr)
		}
	} else if r.HostError != "" {
		p("Host memory: %s", r.HostError)
	}
	if r.Slurm != nil {
		p("Slurm: %s", r.Slurm.String())
	} else {
		p("Slurm: not in a Slurm job")
	}
	if len(r.Env) == 0 {
		p("Allocator environment: none of %s is set", strings.Join(allocatorVars[:2], ", "))
	} else {
		keys := make([]string, 0, len(r.Env))
		for k := range r.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		p("Allocator environment:")
		for _, k := range keys {
			p("  %s=%s", k, r.Env[k])
		}
	}
	for _, a := range r.AllocConf {
		p("PROBLEM: %s", a)
	}
	for _, b := range r.Busy {
		p("PROBLEM: %s: the job would start short of memory; wait for it, pick another GPU with CUDA_VISIBLE_DEVICES, or stop what holds it (see above)", b)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shorten cuts s to n bytes on one line, marking the cut.
func shorten(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
