package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"text/tabwriter"

	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// The fit comparison: how many relaunches an out-of-memory failure takes to
// fit, and how much of the largest value that fits each method keeps, under
// the `fit` action, under plain halving (both through policy.Decide, both
// compensating with gradient accumulation) and under the example policy's
// train-oom rule (examples/gpuguard.yaml).
//
// A fitShape is a training job whose memory behaves as PyTorch's does on a
// GPU, step by step, allocation by allocation:
//
//   - before training: the CUDA context (ctx, seen by NVML, not allocated
//     by PyTorch) and the weights (w);
//   - each training step: the forward pass allocates the activations,
//     value × perUnit (× value for a quadratic knob, a crop side), in
//     layers equal allocations, then one last allocation of value ×
//     lastPerUnit (the logits of a large vocabulary; 0 for none); the
//     backward pass allocates the gradients (grads) a layer at a time while
//     it frees the activations; the first optimizer step allocates its
//     states (opt: Adam's two moments), which stay; zero_grad frees the
//     gradients. A resumed job loads its optimizer states before training;
//   - validation (valPerUnit > 0): no gradients; each layer's output is
//     allocated and the one before it freed, so at most two are held.
//
// An attempt trains trainSteps steps and validates; it dies at the first
// allocation that does not fit in the capacity. Its OOM figures are
// PyTorch's (the request, the total, the free memory, what PyTorch had
// allocated), and the sampler's are what a sampler that sees every step
// would measure: the phase's first figure (its start) and its peak. The
// knob in the failing phase is the one the policy changes (the batch size
// for training, the validation batch size for validation).
type fitShape struct {
	name                 string
	capacity, ctx, w     float64 // bytes
	grads, opt           float64 // bytes; opt appears at the first optimizer step
	perUnit, lastPerUnit float64 // bytes per sample (per pixel² of the knob when quadratic)
	layers               int
	valPerUnit           float64 // validation activations per unit of the validation knob; 0: no validation
	quadratic            bool
	resumed              bool // optimizer states loaded before training
	value                int  // the knob's value as given
	trainSteps           int
}

var fitShapes = []fitShape{
	// A 3B-parameter language model in bf16 with Adam (fp32 moments: 4× the
	// weights) on 80 GB; activations checkpointed per layer.
	{name: "llm-3b-80g", capacity: 80 * gib, ctx: 0.6 * gib, w: 6 * gib, grads: 6 * gib, opt: 24 * gib,
		perUnit: 0.9 * gib, layers: 28, value: 64, trainSteps: 3},
	// The same, resumed from a checkpoint: its optimizer states are loaded first.
	{name: "llm-3b-80g-resumed", capacity: 80 * gib, ctx: 0.6 * gib, w: 6 * gib, grads: 6 * gib, opt: 24 * gib,
		perUnit: 0.9 * gib, layers: 28, resumed: true, value: 64, trainSteps: 3},
	// An 8B model with LoRA: frozen bf16 weights, tiny adapters; the logits
	// of a 128k vocabulary in fp32 are one large allocation per step.
	{name: "lora-8b-logits-80g", capacity: 80 * gib, ctx: 0.6 * gib, w: 16 * gib, grads: 0.1 * gib, opt: 0.2 * gib,
		perUnit: 0.5 * gib, lastPerUnit: 1.9 * gib, layers: 32, value: 64, trainSteps: 3},
	// A ViT-B at 224 px in fp32 on 16 GB: small weights, many layers.
	{name: "vit-b-16g", capacity: 16 * gib, ctx: 0.4 * gib, w: 0.35 * gib, grads: 0.35 * gib, opt: 0.7 * gib,
		perUnit: 0.09 * gib, layers: 12, value: 512, trainSteps: 3},
	// A ResNet-50 batch a little too large on 24 GB.
	{name: "resnet50-24g", capacity: 24 * gib, ctx: 0.5 * gib, w: 0.1 * gib, grads: 0.1 * gib, opt: 0.2 * gib,
		perUnit: 0.1 * gib, layers: 50, value: 256, trainSteps: 3},
	// A segmentation net whose knob is the crop side: memory grows with its
	// square (per unit² here: bytes per pixel at batch 8).
	{name: "seg-crop-24g", capacity: 24 * gib, ctx: 0.5 * gib, w: 0.25 * gib, grads: 0.25 * gib, opt: 0.5 * gib,
		perUnit: 40 << 10, layers: 20, quadratic: true, value: 1024, trainSteps: 3},
	// Validation of a detector on full-size images, its own batch size: the
	// training fits; validation (no gradients) holds two layers at a time,
	// whose largest is the first.
	{name: "val-batch-16g", capacity: 16 * gib, ctx: 0.4 * gib, w: 0.2 * gib, grads: 0.2 * gib, opt: 0.4 * gib,
		perUnit: 0.02 * gib, layers: 20, valPerUnit: 0.6 * gib, value: 64, trainSteps: 3},
	// A batch far too large: a ResNet-50 at 2048 on 16 GB.
	{name: "resnet50-8x-16g", capacity: 16 * gib, ctx: 0.5 * gib, w: 0.1 * gib, grads: 0.1 * gib, opt: 0.2 * gib,
		perUnit: 0.1 * gib, layers: 50, value: 2048, trainSteps: 3},
	// A small model whose cross-entropy over a large vocabulary is the step's
	// one large allocation, batch four times too large.
	{name: "gpt2-logits-24g", capacity: 24 * gib, ctx: 0.5 * gib, w: 0.5 * gib, grads: 0.5 * gib, opt: 1 * gib,
		perUnit: 0.05 * gib, lastPerUnit: 0.4 * gib, layers: 12, value: 192, trainSteps: 3},
}

// feasible is the largest value whose attempt fits in the whole GPU.
func (s fitShape) feasible() int {
	lo, hi := 0, s.value
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if _, _, _, _, fits := s.attempt(mid); fits {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// gpuSim is the memory of one attempt, allocation by allocation, and what a
// sampler and PyTorch's message would say of it.
type gpuSim struct {
	s                fitShape
	inUse            float64
	phase            classify.Phase
	starts, peaks    map[classify.Phase]float64
	failed           *classify.OOM
	failedPhase      classify.Phase
	failedAt         int // training step
	allocatedByTorch float64
	// block: the failing allocation's place, as the torch probe would see
	// it (a layer of the forward, with grad or without; the backward's);
	// nil for an allocation outside the repeated layers (the logits, the
	// optimizer's states).
	block, failedBlock *policy.OOMBlock
}

func (g *gpuSim) setPhase(p classify.Phase) {
	g.phase = p
	if _, ok := g.starts[p]; !ok {
		g.starts[p] = g.inUse / g.s.capacity
	}
}

// alloc allocates n bytes, or records the failure and returns false.
func (g *gpuSim) alloc(n float64, step int) bool {
	if g.inUse+n > g.s.capacity {
		b := func(x float64) *int64 { v := int64(x); return &v }
		g.failed = &classify.OOM{RequestedBytes: b(n), TotalBytes: b(g.s.capacity), FreeBytes: b(g.s.capacity - g.inUse),
			AllocatedBytes: b(g.inUse - g.s.ctx)}
		g.failedPhase, g.failedAt, g.failedBlock = g.phase, step, g.block
		return false
	}
	g.inUse += n
	g.peaks[g.phase] = math.Max(g.peaks[g.phase], g.inUse/g.s.capacity)
	return true
}

func (g *gpuSim) free(n float64) { g.inUse -= n }

// attempt runs the shape with the knob at value (the failing phase's knob:
// training's batch, or validation's) and returns what the policy is told
// (the verdict, the phases' starts and peaks, and the place of the failure
// the torch probe would report).
func (s fitShape) attempt(value int) (classify.Verdict, map[classify.Phase]float64, map[classify.Phase]float64, *policy.OOMBlock, bool) {
	g := &gpuSim{s: s, starts: map[classify.Phase]float64{}, peaks: map[classify.Phase]float64{}}
	train, val := float64(value), 1.0
	if s.valPerUnit > 0 {
		train, val = 8, float64(value) // the training batch fits; validation's is the knob
	}
	u := func(x float64) float64 {
		if s.quadratic {
			return x * x
		}
		return x
	}
	g.inUse = s.ctx + s.w
	haveOpt := s.resumed
	if haveOpt {
		g.inUse += s.opt
	}
	ok := func() bool {
		g.setPhase(classify.PhaseTrain)
		for step := 1; step <= s.trainSteps; step++ {
			chunk := u(train) * s.perUnit / float64(s.layers)
			for l := range s.layers {
				g.block = &policy.OOMBlock{Index: l, Of: s.layers}
				if !g.alloc(chunk, step) {
					return false
				}
			}
			g.block = nil
			last := u(train) * s.lastPerUnit
			if last > 0 && !g.alloc(last, step) {
				return false
			}
			g.free(last)
			for l := range s.layers {
				g.block = &policy.OOMBlock{Index: s.layers - 1 - l, Of: s.layers, Backward: true}
				if !g.alloc(s.grads/float64(s.layers), step) {
					return false
				}
				g.free(chunk)
			}
			g.block = nil
			if !haveOpt {
				for range 2 {
					if !g.alloc(s.opt/2, step) {
						return false
					}
				}
				haveOpt = true
			}
			g.free(s.grads)
		}
		if s.valPerUnit > 0 {
			g.setPhase(classify.PhaseVal)
			// Layer outputs shrink with depth: the first is the largest.
			prev := 0.0
			for l := range s.layers {
				out := u(val) * s.valPerUnit / float64(l+1) / 3
				g.block = &policy.OOMBlock{Index: l, Of: s.layers, NoGrad: true}
				if !g.alloc(out, s.trainSteps) {
					return false
				}
				g.free(prev)
				prev = out
			}
			g.free(prev)
		}
		return true
	}()
	if ok {
		return classify.Verdict{Kind: classify.KindNone}, g.starts, g.peaks, nil, true
	}
	step := int64(g.failedAt)
	return classify.Verdict{Kind: classify.KindGPUOOM, Phase: g.failedPhase, OOM: g.failed, Step: &step}, g.starts, g.peaks, g.failedBlock, false
}

const fitPolicyFmt = `version: 1
knobs:
  batch_size: {yaml: {key: train.batch_size, flag: --config}}
  grad_accum: {yaml: {key: train.grad_accum, flag: --config}}
rules:
  - name: oom
    when: {kind: gpu_oom}
    steps:
      - %s: batch_size
        compensate: grad_accum%s
budget: {relaunches: 20}
`

// fitResult is how one method fared on one fitShape.
type fitResult struct {
	relaunches, value int
	fit               bool
	why               string
	decisions         []string
}

// fitMethods are the methods compared: the fit action with the torch
// probe (told the failing layer's place too), the fit action (told each
// phase's start, as gpuguard's sampler measures it), fit without a sampler
// (no GPU figures beyond the message), and plain halving.
var fitMethods = []struct {
	name, verb    string
	starts, probe bool
}{
	{"fit, with the probe", "fit", true, true},
	{"fit", "fit", true, false},
	{"fit, message only", "fit", false, false},
	{"example policy", "example", true, false},
	{"halve", "halve", false, false},
}

// examplePolicy is examples/gpuguard.yaml (its train-oom rule halves the
// batch and doubles accumulation; its val-oom rule crops validation, which
// these shapes do not model: a validation shape is not run with it).
var examplePolicy = "examples/gpuguard.yaml"

// runFit runs s under the one-step policy verb until it fits; starts: the
// policy is told the phases' starts; probe: the failure's place.
func runFit(verb string, starts, probe bool, s fitShape) fitResult {
	extra := ""
	if verb == "fit" && s.quadratic {
		extra = "\n        scaling: quadratic"
	}
	src, file := fmt.Appendf(nil, fitPolicyFmt, verb, extra), verb+".yaml"
	if verb == "example" {
		data, err := os.ReadFile(examplePolicy)
		if err != nil {
			panic(fmt.Sprintf("%v (run from the repository root)", err))
		}
		src, file = data, examplePolicy
	}
	pol, err := policy.Parse(file, src)
	if err != nil {
		panic(err)
	}
	cfg := fmt.Sprintf("train:\n  batch_size: %d\n  grad_accum: 1\n  workers: 4\n", s.value)
	job := policy.Job{Argv: []string{"python3", "train.py", "--config", "config.yaml"}, Dir: "/sim"}
	vals, err := pol.Start(job, func(string) ([]byte, error) { return []byte(cfg), nil })
	if err != nil {
		panic(err)
	}
	st := policy.NewState(vals)
	var r fitResult
	for n := 1; ; n++ {
		value := atoi(st.Values["batch_size"])
		v, st0, peaks, block, fits := s.attempt(value)
		r.relaunches, r.value = n-1, value
		if fits {
			r.fit = true
			return r
		}
		out := policy.Outcome{Verdict: v, Exit: classify.Exit{Code: 1}, Attempt: n, Rand: 0.5, Peaks: peaks}
		if starts {
			out.Starts = st0
		}
		if probe {
			out.Block = block
		}
		d := pol.Decide(st, out)
		if d.Verb != policy.Relaunch {
			r.why = d.Reason
			return r
		}
		r.decisions = append(r.decisions, d.Describe())
		st = d.State
	}
}

// fitTable prints the comparison, and the totals per method.
func fitTable(w io.Writer, verbose bool) {
	// fitTable is run from the repository root (examples/gpuguard.yaml).
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "shape\tvalue\tfeasible\tmethod\trelaunches\tfits\tends at\treached")
	sums := make([]struct {
		relaunches int
		reached    float64
		worse      int
	}, len(fitMethods))
	for _, s := range fitShapes {
		feas := s.feasible()
		results := make([]fitResult, len(fitMethods))
		for i, m := range fitMethods {
			if m.verb == "example" && s.valPerUnit > 0 {
				continue
			}
			results[i] = runFit(m.verb, m.starts, m.probe, s)
		}
		halve := results[len(results)-1]
		for i, m := range fitMethods {
			r := results[i]
			if m.verb == "example" && s.valPerUnit > 0 {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t-\tn/a: crops validation instead\t-\t-\n", s.name, s.value, feas, m.name)
				continue
			}
			fits := "yes"
			if !r.fit {
				fits = "no: " + r.why
			}
			reached := float64(r.value) / float64(feas)
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%s\t%d\t%.0f%%\n", s.name, s.value, feas, m.name, r.relaunches, fits, r.value, 100*reached)
			sums[i].relaunches += r.relaunches
			sums[i].reached += reached
			if r.relaunches > halve.relaunches {
				sums[i].worse++
			}
			if verbose {
				for _, d := range r.decisions {
					fmt.Fprintf(tw, "\t\t\t\t\t%s\t\t\n", d)
				}
			}
		}
	}
	tw.Flush()
	for i, m := range fitMethods {
		n := len(fitShapes)
		if m.verb == "example" {
			n = 0
			for _, s := range fitShapes {
				if s.valPerUnit == 0 {
					n++
				}
			}
		}
		fmt.Fprintf(w, "%s: %d relaunches over %d shapes (more than halving on %d), %.0f%% of the largest feasible value on average\n",
			m.name, sums[i].relaunches, n, sums[i].worse, 100*sums[i].reached/float64(n))
	}
}
