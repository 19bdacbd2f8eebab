package classify

import (
	"fmt"
	"strings"
	"testing"
)

// One line each, the phase it shows read by its shape (progress_shape.go
// and the frameworks' forms); "" for the traps.
func TestProgressLineShapes(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Phase
	}{
		{"Training...", PhaseTrain},
		{"Validating...", PhaseVal},
		{"Starting epoch 3", PhaseTrain},
		{"Begin evaluation", PhaseVal},
		{"=> Evaluating on test set", PhaseVal},
		{"Training for 10 epochs", PhaseTrain},
		{"***** eval metrics *****", PhaseVal},
		{"Epoch 3 Batch 100/600 Loss 0.2311", PhaseTrain},
		{"Eval Epoch: 3 [100/600]", PhaseVal},
		{"Test Epoch: 3 [100/600]\tLoss: 0.23", PhaseVal},
		{"train: epoch 3 iter 100 loss 0.23", PhaseTrain},
		{"valid | epoch 003 | loss 2.31", PhaseVal},
		{"test: 100%|██████████| 10/10", PhaseVal},
		{"| train | 2     | 1200/4000 | 1.4410 |", PhaseTrain},
		{"| eval  | 2     | 20/80     | 1.5102 |", PhaseVal},
		{"I0305 11:02:10.118201 140 train.py:145] eval epoch: 4, loss: 0.3411", PhaseVal},
		// Traps.
		{"***** train metrics *****", PhaseNone}, // training is over
		{"Epoch 1 | Train Loss: 0.45 | Val Loss: 0.50", PhaseNone},
		{"Training data: 90000 images", PhaseNone},
		{"validation set: 5000 images", PhaseNone},
		{"=> loading checkpoint 'model_best.pth.tar'", PhaseNone},
		{"--- config ---", PhaseNone},
		{"testing_mode=off, evaluation_strategy=steps", PhaseNone},
	} {
		_, seen := classifyTrace(t, []byte(tc.line+"\n"))
		got := PhaseNone
		if len(seen[1]) > 0 {
			got = seen[1][len(seen[1])-1]
		}
		if got != tc.want {
			t.Errorf("%q: %s, want %s", tc.line, fmt.Sprint(seen[1]), tc.want)
		}
	}
}

// spaceLoss finds what the two searches it replaces find: the first " loss"
// or " Loss", after look-alikes ("oss" alone, "boss", "loss" with no space,
// " LOSS").
func TestSpaceLoss(t *testing.T) {
	naive := func(m string) int {
		i, j := strings.Index(m, " loss"), strings.Index(m, " Loss")
		if i < 0 || j >= 0 && j < i {
			return j
		}
		return i
	}
	for _, m := range []string{
		"", "oss", " loss", " Loss", "loss", "xloss 1 Loss 2", "boss oss  loss", " LOSS  Loss",
		"[5][100/800] train loss 0.33", "step 30/100 | eval Loss 0.91 | train loss 0.3",
		"os", " lo", "gloss", "\tloss", " l oss", "oss loss",
	} {
		if got, want := spaceLoss([]byte(m)), naive(m); got != want {
			t.Errorf("spaceLoss(%q) = %d, want %d", m, got, want)
		}
	}
}
