package policy

import (
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// TestRaiseSlurmMem: the new request from the job's current one, its
// bounds, and the per-CPU form, as Decide reports them.
func TestRaiseSlurmMem(t *testing.T) {
	for _, tc := range []struct {
		name string
		step string
		mem  *SlurmMem
		want string // the change, or "cannot: <why>"
		mib  int64
	}{
		{"per node ×1.5", "raise_slurm_mem: {by: 1.5, max: 64G}", &SlurmMem{MiB: 4096}, "mem 4G→6G", 6144},
		{"default factor 1.5", "raise_slurm_mem: {max: 64G}", &SlurmMem{MiB: 300}, "mem 300M→450M", 450},
		{"rounds up to a MiB", "raise_slurm_mem: {by: 1.5, max: 64G}", &SlurmMem{MiB: 301}, "mem 301M→452M", 452},
		{"held at max", "raise_slurm_mem: {by: 2, max: 6G}", &SlurmMem{MiB: 4096}, "mem 4G→6G", 6144},
		{"max in MiB", "raise_slurm_mem: {by: 2, max: 5000}", &SlurmMem{MiB: 4096}, "mem 4G→5000M", 5000},
		{"per CPU", "raise_slurm_mem: {by: 2, max: 8G}", &SlurmMem{MiB: 2048, PerCPU: true}, "mem-per-cpu 2G→4G", 4096},
		{"at max", "raise_slurm_mem: {by: 2, max: 4G}", &SlurmMem{MiB: 4096}, "cannot: mem is 4G, at its ceiling (max 4G)", 0},
		{"above max", "raise_slurm_mem: {by: 2, max: 1G}", &SlurmMem{MiB: 4096, PerCPU: true}, "cannot: mem-per-cpu is 4G, at its ceiling (max 1G)", 0},
		{"no request", "raise_slurm_mem: {max: 8G}", nil, "cannot: not a Slurm job with a memory request (sbatch --mem or --mem-per-cpu)", 0},
		{"Slurm refused", "raise_slurm_mem: {max: 8G}", &SlurmMem{MiB: 1024, Refused: "Requested partition configuration not available now"},
			"cannot: Slurm refused to raise the memory request: Requested partition configuration not available now", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := actionPolicy(t, tc.step)
			out := oom(classify.PhaseTrain)
			out.Verdict.Kind = classify.KindHostOOM
			out.SlurmMem = tc.mem
			d := p.Decide(NewState(Values{}), out)
			if cannot, ok := strings.CutPrefix(tc.want, "cannot: "); ok {
				if d.Verb != GiveUp || !strings.Contains(d.Reason, "rule r step 1: "+cannot) {
					t.Fatalf("%s: %s, want give_up because %q", d.Verb, d.Reason, cannot)
				}
				return
			}
			c, ok := d.SlurmMemChange()
			if d.Verb != Relaunch || !ok {
				t.Fatalf("%s: %s, want a relaunch raising the memory", d.Verb, d.Reason)
			}
			if c.String() != tc.want || c.MiB != tc.mib {
				t.Errorf("change %s (%d MiB), want %s (%d MiB)", c, c.MiB, tc.want, tc.mib)
			}
			if want := map[bool]string{false: "MinMemoryNode", true: "MinMemoryCPU"}[tc.mem.PerCPU]; c.SlurmField != want {
				t.Errorf("field %s, want %s", c.SlurmField, want)
			}
		})
	}
}

// TestRaiseSlurmMemAfterTheFloors: the usual rule, workers and batch first;
// the memory is raised once they are at their floors, and the rule gives up
// when Slurm refuses.
func TestRaiseSlurmMemAfterTheFloors(t *testing.T) {
	p := mustParse(t, `version: 1
knobs:
  workers: {flag: --workers}
rules:
  - name: host
    when: {kind: [host_oom, cpu_alloc_oom]}
    steps:
      - cut_workers: workers
      - raise_slurm_mem: {by: 1.5, max: 1G}
budget: {relaunches: 10}
`)
	out := oom(classify.PhaseTrain)
	out.Verdict.Kind = classify.KindHostOOM
	out.SlurmMem = &SlurmMem{MiB: 512}
	d := p.Decide(NewState(Values{"workers": Text("1")}), out)
	if _, ok := d.SlurmMemChange(); ok || d.Verb != Relaunch {
		t.Fatalf("first: %s, want workers cut", d.Describe())
	}
	d = p.Decide(d.State, out)
	if c, ok := d.SlurmMemChange(); !ok || c.String() != "mem 512M→768M" || d.Step != 2 {
		t.Fatalf("second: %s, want mem raised by step 2", d.Describe())
	}
	if !strings.Contains(d.Describe(), "mem 512M→768M") {
		t.Errorf("Describe = %q", d.Describe())
	}
	out.SlurmMem = &SlurmMem{MiB: 1024}
	d = p.Decide(d.State, out)
	if d.Verb != GiveUp || !strings.Contains(d.Reason, "mem is 1G, at its ceiling (max 1G)") {
		t.Fatalf("third: %s", d.Reason)
	}
}

func TestSlurmSize(t *testing.T) {
	for in, want := range map[string]int64{"64G": 65536, "4000": 4000, "4000M": 4000, "1.5g": 1536, "1T": 1 << 20, "512K": 1} {
		if got, err := ParseSlurmSize(in); err != nil || got != want {
			t.Errorf("ParseSlurmSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "G", "-1G", "lots", "0"} {
		if _, err := ParseSlurmSize(bad); err == nil {
			t.Errorf("ParseSlurmSize(%q): no error", bad)
		}
	}
	if SlurmSize(6144) != "6G" || SlurmSize(450) != "450M" || SlurmSize(1500) != "1500M" {
		t.Errorf("SlurmSize: %s %s %s", SlurmSize(6144), SlurmSize(450), SlurmSize(1500))
	}
}

// A dry run cannot know the request: the preview says what the step does.
func TestRaiseSlurmMemPreview(t *testing.T) {
	p := actionPolicy(t, "raise_slurm_mem: {by: 2, max: 64G}")
	got := strings.Join(p.Preview(Values{}), "\n")
	if want := "rule r step 1 [any failure]: raises the Slurm job's memory request (--mem or --mem-per-cpu, as submitted) ×2, up to 64G, and requeues the job; repeats on later failures until max"; got != want {
		t.Errorf("Preview:\n%s\nwant\n%s", got, want)
	}
}
