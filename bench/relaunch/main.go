// Command relaunch compares how many relaunches a job needs before it fits
// in GPU memory under gpuguard's rules (the example policy,
// examples/gpuguard.yaml: crop validation images for a validation OOM,
// halve the batch and double gradient accumulation for a training OOM, fix
// the allocator for fragmentation) and under plain halving (what
// Accelerate's find_executable_batch_size and Composer's automatic
// microbatching do: every OOM halves the batch, whatever its cause).
//
// No process runs: the policy is pure, so the program feeds policy.Decide
// the verdict a simulated job would produce. The simulated job's memory is
//
//	train peak = fixed + batch × perSample × (trainRes/256)²
//	val peak   = fixed + batch × perSample × (valRes/256)² × valFactor
//
// where valRes is the validation crop (full resolution when unset), and a
// job with fragmentation can use only (1-frag) of the GPU until its
// allocator is configured. An attempt dies at the first phase whose peak
// does not fit (training comes first); the verdict says the phase and
// whether fragmentation was to blame (peak within the GPU, beyond the
// usable part), as the classifier would from PyTorch's message.
//
//	go run ./bench/relaunch            # the table of shapes
//	go run ./bench/relaunch -policy examples/gpuguard.yaml
//	go run ./bench/relaunch -fit       # the fit action against halving (fit.go)
//	go run ./bench/relaunch -prevent   # memory growth with and without prevent: (prevent.go)
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

const gib = 1 << 30

// shape is a simulated job.
type shape struct {
	name        string
	capacity    float64 // GPU memory, bytes
	fixed       float64 // weights, optimizer state, CUDA context
	perSample   float64 // activations per training sample at 256 px
	batch       int
	trainRes    float64
	fullRes     float64 // validation resolution when no crop is set
	valFactor   float64 // validation activations relative to training's (no backward: < 1)
	frag        float64 // fraction of memory lost to fragmentation until the allocator is fixed
	description string
}

var shapes = []shape{
	{"fits", 16 * gib, 4 * gib, 0.1 * gib, 32, 256, 256, 0.4, 0, "fits as given"},
	{"train-2x", 16 * gib, 4 * gib, 0.3 * gib, 64, 256, 256, 0.4, 0, "training batch twice too large"},
	{"train-8x", 16 * gib, 4 * gib, 0.3 * gib, 256, 256, 256, 0.4, 0, "training batch eight times too large"},
	{"hires-train", 16 * gib, 4 * gib, 0.1 * gib, 32, 512, 512, 0.4, 0, "training at 512 px"},
	{"val-fullres", 16 * gib, 4 * gib, 0.1 * gib, 32, 256, 1024, 0.4, 0, "validation at full 1024 px resolution"},
	{"val-2048", 16 * gib, 4 * gib, 0.1 * gib, 32, 256, 2048, 0.4, 0, "validation at 2048 px"},
	{"val+train", 16 * gib, 4 * gib, 0.25 * gib, 64, 256, 1024, 0.4, 0, "both validation and training too large"},
	{"fragmented", 16 * gib, 4 * gib, 0.1 * gib, 100, 256, 256, 0.4, 0.25, "fits only without fragmentation"},
	{"frag+train", 16 * gib, 4 * gib, 0.2 * gib, 64, 256, 256, 0.4, 0.2, "fragmentation and a large batch"},
	{"llm-80g", 80 * gib, 40 * gib, 1.5 * gib, 64, 256, 256, 0.3, 0, "80 GiB GPU, batch four times too large"},
}

// attempt runs the simulated job once with batch and val crop (0: full
// resolution) and returns the verdict of its end (Kind none when it fits).
func (s shape) attempt(batch int, valCrop float64, allocFixed bool) classify.Verdict {
	usable := s.capacity
	if !allocFixed {
		usable *= 1 - s.frag
	}
	train := s.fixed + float64(batch)*s.perSample*sq(s.trainRes/256)
	vres := s.fullRes
	if valCrop > 0 && valCrop < vres {
		vres = valCrop
	}
	val := s.fixed + float64(batch)*s.perSample*sq(vres/256)*s.valFactor
	for _, p := range []struct {
		phase classify.Phase
		peak  float64
	}{{classify.PhaseTrain, train}, {classify.PhaseVal, val}} {
		if p.peak > usable {
			return classify.Verdict{Kind: classify.KindGPUOOM, Phase: p.phase, Fragmentation: p.peak <= s.capacity}
		}
	}
	return classify.Verdict{Kind: classify.KindNone}
}

func sq(x float64) float64 { return x * x }

// result is how one method fared on one shape.
type result struct {
	relaunches   int
	batch, accum int
	valCrop      string
	fit          bool
	why          string
}

// gpuguard runs the shape under pol until it fits or the policy gives up.
func gpuguard(pol *policy.Policy, s shape) result {
	cfg := fmt.Sprintf("train:\n  batch_size: %d\n  grad_accum: 1\n  workers: 4\n", s.batch)
	job := policy.Job{Argv: []string{"python3", "train.py", "--config", "config.yaml"}, Dir: "/sim"}
	vals, err := pol.Start(job, func(string) ([]byte, error) { return []byte(cfg), nil })
	if err != nil {
		fmt.Fprintln(os.Stderr, "relaunch: the policy does not start on the simulated job:", err)
		os.Exit(2)
	}
	st := policy.NewState(vals)
	for n := 1; ; n++ {
		batch, accum := atoi(st.Values["batch_size"]), atoi(st.Values["grad_accum"])
		crop := 0.0
		if v, ok := st.Values["val_crop_size"]; ok && !v.Null && v.Text != "" {
			crop = float64(atoi(v))
		}
		_, allocFixed := st.Values[policy.EnvKey("PYTORCH_CUDA_ALLOC_CONF")]
		v := s.attempt(batch, crop, allocFixed)
		r := result{relaunches: n - 1, batch: batch, accum: accum, valCrop: "full"}
		if crop > 0 {
			r.valCrop = strconv.Itoa(int(crop))
		}
		if v.Kind == classify.KindNone {
			r.fit = true
			return r
		}
		d := pol.Decide(st, policy.Outcome{Verdict: v, Exit: classify.Exit{Code: 1}, Attempt: n, Rand: 0.5})
		if d.Verb != policy.Relaunch {
			r.why = d.Reason
			return r
		}
		st = d.State
	}
}

// halving is plain halving: every OOM halves the batch (no accumulation to
// compensate), down to 1.
func halving(s shape) result {
	batch := s.batch
	for n := 1; ; n++ {
		v := s.attempt(batch, 0, false)
		r := result{relaunches: n - 1, batch: batch, accum: 1, valCrop: "full"}
		if v.Kind == classify.KindNone {
			r.fit = true
			return r
		}
		if batch == 1 {
			r.why = "batch 1 does not fit"
			return r
		}
		batch /= 2
	}
}

func atoi(v policy.Value) int {
	n, err := strconv.Atoi(v.Text)
	if err != nil {
		return 0
	}
	return n
}

func main() {
	polFile := flag.String("policy", "examples/gpuguard.yaml", "gpuguard policy file to compare")
	fit := flag.Bool("fit", false, "compare the fit action with halving on training OOMs instead (relaunches to fit, fraction of the largest feasible batch)")
	verbose := flag.Bool("v", false, "with -fit: print each decision")
	prevent := flag.Bool("prevent", false, "compare jobs whose memory grows with and without prevent: (OOM deaths, work lost, false stops; prevent.go)")
	flag.Parse()
	if *prevent {
		preventTable(os.Stdout)
		return
	}
	if *fit {
		fitTable(os.Stdout, *verbose)
		return
	}
	data, err := os.ReadFile(*polFile)
	if err != nil {
		fmt.Fprintf(os.Stderr, "relaunch: %v (run from the repository root, or pass -policy)\n", err)
		os.Exit(2)
	}
	pol, err := policy.Parse(*polFile, data)
	if err != nil {
		fmt.Fprintln(os.Stderr, "relaunch:", err)
		os.Exit(2)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "shape\tmethod\trelaunches\tfits\tbatch\taccum\teffective\tkept\tval crop")
	var sums [2]struct{ relaunches, kept, fit int }
	for _, s := range shapes {
		for i, m := range []struct {
			name string
			r    result
		}{{"gpuguard", gpuguard(pol, s)}, {"halving", halving(s)}} {
			eff := m.r.batch * m.r.accum
			kept := eff == s.batch
			fits := "yes"
			if !m.r.fit {
				fits = "no: " + m.r.why
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%d/%d\t%v\t%s\n", s.name, m.name, m.r.relaunches, fits, m.r.batch, m.r.accum, eff, s.batch, kept, m.r.valCrop)
			sums[i].relaunches += m.r.relaunches
			if kept && m.r.fit {
				sums[i].kept++
			}
			if m.r.fit {
				sums[i].fit++
			}
		}
	}
	tw.Flush()
	fmt.Printf("\nover %d shapes: gpuguard %d relaunches, %d fit, %d kept the effective batch; halving %d relaunches, %d fit, %d kept it\n",
		len(shapes), sums[0].relaunches, sums[0].fit, sums[0].kept, sums[1].relaunches, sums[1].fit, sums[1].kept)
}
