package classify

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tqdmFrames is what a pseudo-terminal shows of a custom loop that prints
// "Epoch E/10 step S/500 loss=..." every 10 steps beside a per-epoch tqdm bar
// of 50 batches: the bar is redrawn with '\r', and a print while the bar is
// shown starts right after the bar's text (glued) unless the script uses
// tqdm.write, which clears the bar first.
func tqdmFrames(epoch, from, to, perEpoch int, desc bool, write bool) string {
	var b strings.Builder
	for step := from; step <= to; step++ {
		pos := (step-1)%perEpoch + 1
		pct := 100 * pos / perEpoch
		bar := fmt.Sprintf("%3d%%|%-10s| %d/%d [00:%02d<00:%02d,  8.10it/s]", pct, strings.Repeat("█", pct/10), pos, perEpoch, pos/10, (perEpoch-pos)/10)
		if desc {
			bar = fmt.Sprintf("Epoch %d: ", epoch) + bar
		}
		b.WriteString("\r" + bar)
		if step%10 == 0 {
			msg := fmt.Sprintf("Epoch %d/10 step %d/500 loss=0.%03d", epoch, step, 900-step)
			if write {
				b.WriteString("\r" + strings.Repeat(" ", len(bar)) + "\r" + msg + "\r\n\r" + bar)
			} else {
				b.WriteString(msg + "\r\n")
			}
		}
	}
	return b.String()
}

// Issue 12: a job printing "Epoch 3/10 step 120/500 loss=..." beside a
// per-epoch tqdm bar ("29/50 [...]") trains step 120, then 130, not batch
// 29; an attempt that resumed from step 100 and trained on to 130 made
// progress.
func TestStepBesideEpochBar(t *testing.T) {
	for _, desc := range []bool{true, false} {
		for _, write := range []bool{false, true} {
			t.Run(fmt.Sprintf("desc=%v,tqdm.write=%v", desc, write), func(t *testing.T) {
				// resumed from step_100: steps 101..129 are batches 1..29 of epoch 3
				log := "resumed from step_100.ckpt\n" + tqdmFrames(3, 101, 120, 50, desc, write)
				c, evs := classifyEvents(t, log+tqdmFrames(3, 121, 129, 50, desc, write))
				v := c.Verdict()
				checkStep(t, v, stepWant{120, StepGlobal, 500, 3})
				if !strings.HasPrefix(v.StepText, "Epoch 3/10 step 120/500 loss=") && !strings.Contains(v.StepText, "]Epoch 3/10 step 120/500 loss=") {
					t.Errorf("step text %q", v.StepText)
				}
				if want := strings.Count(log, "\n"); v.StepLine != want { // the last line of log
					t.Errorf("step read at line %d, want %d", v.StepLine, want)
				}
				// Each counter is reported with its kind: the steps 110 and 120,
				// and the bar's batches when the bar has a label (but for the
				// frames that a print is glued to: one reading per line, the
				// step).
				kinds := map[StepKind]int{}
				for _, e := range evs {
					if e.Type == EventStep {
						kinds[e.StepKind]++
						if e.StepKind == StepGlobal && e.Step != 110 && e.Step != 120 || e.Epoch != 3 {
							t.Errorf("event %+v", e)
						}
					}
				}
				want := 0
				if desc {
					want = map[bool]int{true: 29, false: 27}[write]
				}
				if kinds[StepGlobal] != 2 || kinds[StepInEpoch] != want {
					t.Errorf("step events by kind %v, want 2 global and %d in_epoch", kinds, want)
				}
				v = classifyString(t, log+tqdmFrames(3, 121, 130, 50, desc, write)+tqdmFrames(3, 131, 132, 50, desc, write), ClassifierOptions{})
				checkStep(t, v, stepWant{130, StepGlobal, 500, 3})
				if c, ok := v.Position().Cmp(GlobalStep(100)); !ok || c != 1 {
					t.Errorf("step %s against the checkpoint's step 100: %d, %v; want after", fmtPtr(v.Step), c, ok)
				}
			})
		}
	}
}

// The README's example under a terminal: attempt 1 dies validating at step
// 50, attempt 2 resumes from step_50.ckpt, trains steps 51-100 (writing
// step_100.ckpt) and dies in training at step 101. The bar's "50/50" is the
// batch within the epoch; its "[step 100, ...]" is the step.
func TestStepExampleUnderPTY(t *testing.T) {
	for _, tc := range []struct {
		file    string
		phase   Phase
		want    stepWant
		text    string
		resumed int64
	}{
		{"example-train-pty-attempt1.log", PhaseVal, stepWant{50, StepGlobal, -1, 1}, "Epoch 1: 100%|##########| 50/50 [step 50, loss=1.151]", -1},
		{"example-train-pty-attempt2.log", PhaseTrain, stepWant{100, StepGlobal, -1, 3}, "Epoch 2: 100%|##########| 50/50 [step 100, loss=0.550]", 50},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			v := classifyString(t, string(data), ClassifierOptions{})
			if v.Kind != KindGPUOOM || v.Phase != tc.phase {
				t.Errorf("%s in %q, want gpu_oom in %q", v.Kind, v.Phase, tc.phase)
			}
			checkStep(t, v, tc.want)
			if v.StepText != tc.text {
				t.Errorf("step text %q, want %q", v.StepText, tc.text)
			}
			if tc.resumed >= 0 {
				if c, ok := v.Position().Cmp(GlobalStep(tc.resumed)); !ok || c != 1 {
					t.Errorf("attempt resumed from step %d: %d, %v; want after", tc.resumed, c, ok)
				}
			}
		})
	}
}

// The corpus logs, read for their steps (the manifest says nothing of
// steps; these are what each log shows).
func TestStepCorpus(t *testing.T) {
	loadManifest(t) // skips when the corpus is absent
	const g, e = StepGlobal, StepInEpoch
	for file, tc := range map[string]struct {
		want stepWant
		text string // what the line the step was read from contains
	}{
		"deepspeed-log-dist-step-and-timer-lines-in-notebook.log":                     {stepWant{130, g, -1, -1}, "[Rank 0] step=130, skipped=5"},
		"detectron2-evaluator-progress-console-logger-format.log":                     {stepWant{-1, StepNone, -1, -1}, ""},
		"detectron2-train-loop-start-and-event-writer-lines.log":                      {stepWant{59, g, -1, -1}, "iter: 59"},
		"fairseq-train-lines-with-oom-counter-and-mid-epoch-valid.log":                {stepWant{1047, g, -1, 1}, "num_updates=1047"},
		"hf-trainer-padded-dict-logs-tqdm-glued-to-deepspeed-step.log":                {stepWant{2500, g, -1, -1}, "step=2500, skipped=2488"},
		"hf-trainer-running-training-banner-with-logger-prefix.log":                   {stepWant{-1, StepNone, -1, -1}, ""},
		"lightning-0.8-validating-bar-above-combined-epoch-bar.log":                   {stepWant{-1, StepNone, -1, 7}, ""},
		"lightning-bars-under-mpi-prefix-with-octal-cr-and-esc.log":                   {stepWant{0, e, 6, 1}, "Epoch 1:   0% 0/6"},
		"litgpt-style-iter-lines-with-periodic-val-loss-line.log":                     {stepWant{153, g, -1, 1}, "iter 153 step 153"},
		"mmengine-epoch-train-lines-short-timestamp-day-eta.log":                      {stepWant{3300, e, 7329, 2}, "[2][3300/7329]"},
		"nemo2-training-iteration-lines-then-checkpoint-val-loss-warning.log":         {stepWant{499, g, -1, 0}, "global_step: 499"},
		"ultralytics-epoch-header-train-bar-val-bar-results-row.log":                  {stepWant{57, e, 57, 88}, "88/300"},
		"ultralytics-train-bars-interleaved-with-wrapper-timestamps-then-val-bar.log": {stepWant{143, e, 143, 1}, "143/143"},
	} {
		t.Run(strings.TrimSuffix(file, ".log"), func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(corpusDir, "phases", file))
			if err != nil {
				t.Fatal(err)
			}
			v := classifyString(t, string(data), ClassifierOptions{})
			checkStep(t, v, tc.want)
			if !strings.Contains(v.StepText, tc.text) {
				t.Errorf("step read from %q, want a line with %q", v.StepText, tc.text)
			}
			if text := strings.TrimPrefix(v.StepText, "…"); v.Step != nil && !strings.Contains(lineAt(data, v.StepLine), strings.TrimSpace(text[:min(len(text), 20)])) {
				t.Errorf("line %d is %q, not the step's line %q", v.StepLine, lineAt(data, v.StepLine), v.StepText)
			}
		})
	}
}

// lineAt is the 1-based line n of data.
func lineAt(data []byte, n int) string {
	ls := strings.Split(string(data), "\n")
	if n < 1 || n > len(ls) {
		return ""
	}
	return ls[n-1]
}
