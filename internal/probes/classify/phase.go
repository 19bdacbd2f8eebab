package classify

// Phase markers.
//
// A line is a phase line when a framework prints it only while training or
// only while validating: a banner ("***** Running training *****"), a
// progress bar with a phase label ("Validation DataLoader 0:  50%|"), a
// per-iteration log line ("Epoch(train) [2][3150/7329]"), a results row
// (Ultralytics' "all 251 33612 ..."). Each detector below recognises one
// framework's forms with plain byte comparisons; the prefilter (see
// classify_scan.go) decides which detectors a line reaches.
//
// Rules that are not a pattern:
//
//   - Lightning 1.x counts training and validation batches in one "Epoch N:"
//     bar, which keeps moving while validation runs. An "Epoch N:" bar
//     therefore does not end a validation that has not finished (its bar has
//     not reached N/N) in the same epoch.
//   - A script may print "gpuguard: phase=train" or "gpuguard: phase=val"
//     (optionally followed by "step=N" and "epoch=N"). Once such a line has
//     been seen, only such lines change the phase: the script knows better
//     than any heuristic.
//   - Patterns from the policy (ClassifierOptions.PhasePatterns) are tried
//     before the built-in detectors.
//   - Validation results after which a framework trains on without another
//     marker (Megatron-LM's "validation loss at iteration N |", litgpt's
//     "iter N: val loss ..., val time: ...") end the validation: training.
//   - A sanity check is a finished validation: the epoch bar after it is
//     training even when the check's bar never showed its last batch.
//   - A bar both phases draw (Paddle's "step 10/938 [...] - loss:") is in
//     the phase in effect (phaseHit.follow).
//   - A traceback's frame naming a function that runs only in one phase
//     ("in evaluate_and_print_results", "in training_step") is a phase line:
//     the deepest, printed last, decides the phase of the error after it.
//   - Unlabelled bars: Hugging Face's training bar is the one whose total is
//     the run's optimization steps (from its banner, or from the bar its
//     first log dict is written under); once known, another unlabelled bar
//     is its evaluation. SpeechBrain's training bar shows "train_loss=";
//     an unlabelled bar after it is its validation.

import (
	"bytes"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
)

// valKeywords and trainKeywords are the keywords detectVal and detectTrain
// look at: a line with none of them skips the detector.
var valKeywords, trainKeywords hitSet

func init() {
	for _, k := range []kw{kwValid, kwParenVal, kwParenTest, kwValBracket, kwEvalDict, kwEvalBracket, kwEvaluat, kwInference, kwTest, kwImages, kwTop1, kwEvalBatch} {
		valKeywords.set(k, 0)
	}
	for _, k := range []kw{kwEpoch, kwIter, kwTrain, kwStep, kwLossDict, kwSkipped, kwOverflow} {
		trainKeywords.set(k, 0)
	}
}

// phaseHit is what a phase detector found on a line.
type phaseHit struct {
	phase     Phase
	done      bool   // the line ends (or reports the results of) a validation
	combined  bool   // a Lightning "Epoch N:" bar, which also counts validation batches
	explicit  bool   // a "gpuguard: phase=" line
	follow    bool   // a bar that training and evaluation both draw: the line is in the phase in effect
	lossDict  bool   // a Hugging Face log dict ("{'loss': ...}")
	bareTrain bool   // SpeechBrain's training bar: a bare tqdm bar with "train_loss=" (see Classifier.bareTrain)
	nan       bool   // the line reports a NaN or infinite loss
	ends      bool   // the line ends a validation that training goes on after (progress_shape.go)
	banner    bool   // Hugging Face's and Accelerate's "Total optimization steps = N" (tot is N)
	kind      kindID // the kind of step
	epoch     int64  // -1: not printed
	cur, tot  int64  // the line's progress counter (i/N), -1: none

	// The step the line shows, of the kind kind, and the M of its "N/M"
	// (-1: none). Set with global and inEpoch.
	step    int64
	stepTot int64
}

// kindID is a StepKind inside the classifier (a byte, not a string).
type kindID uint8

const (
	kindNone kindID = iota
	kindGlobal
	kindInEpoch
)

var stepKinds = [...]StepKind{kindNone: StepNone, kindGlobal: StepGlobal, kindInEpoch: StepInEpoch}

func newPhaseHit(p Phase) phaseHit {
	return phaseHit{phase: p, epoch: -1, step: -1, stepTot: -1, cur: -1, tot: -1}
}

// global records the job's training step v (of tot, -1: not printed). It
// replaces a position within the epoch read before on the same line.
func (r *phaseHit) global(v, tot int64) {
	if v >= 0 {
		r.step, r.stepTot, r.kind = v, tot, kindGlobal
	}
}

// inEpoch records the position v of tot within the epoch, unless the line
// already showed a training step.
func (r *phaseHit) inEpoch(v, tot int64) {
	if v >= 0 && r.kind != kindGlobal {
		r.step, r.stepTot, r.kind = v, tot, kindInEpoch
	}
}

// userPattern is a policy's phase pattern, with a literal that every match
// must contain, used to skip the regular expression on most lines.
type userPattern struct {
	phase   Phase
	re      *regexp.Regexp
	literal string // "" when none could be derived
	fold    bool   // literal is lower case and compared without case
}

// compilePhasePatterns checks and compiles the policy's patterns.
func compilePhasePatterns(ps []PhasePattern) ([]userPattern, error) {
	var out []userPattern
	for i, p := range ps {
		if p.Phase != PhaseTrain && p.Phase != PhaseVal {
			return nil, fmt.Errorf("phase pattern %d (%q): phase must be %q or %q, not %q", i+1, p.Regexp, PhaseTrain, PhaseVal, p.Phase)
		}
		re, err := regexp.Compile(p.Regexp)
		if err != nil {
			return nil, fmt.Errorf("phase pattern %d for %s: %w; fix the regular expression in the policy file (Go RE2 syntax)", i+1, p.Phase, err)
		}
		lit, fold := requiredLiteral(p.Regexp)
		out = append(out, userPattern{phase: p.Phase, re: re, literal: lit, fold: fold})
	}
	return out, nil
}

// requiredLiteral returns a literal string that every match of expr contains
// (the longest literal among the top-level parts of a concatenation), or "".
func requiredLiteral(expr string) (lit string, fold bool) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return "", false
	}
	re = re.Simplify()
	consider := func(r *syntax.Regexp) {
		if r.Op != syntax.OpLiteral {
			return
		}
		s := string(r.Rune)
		f := r.Flags&syntax.FoldCase != 0
		if f {
			for _, c := range s {
				if c >= 0x80 {
					return // only ASCII folding is supported by the prefilter
				}
			}
			s = strings.ToLower(s)
		}
		if len(s) > len(lit) {
			lit, fold = s, f
		}
	}
	switch re.Op {
	case syntax.OpLiteral:
		consider(re)
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			consider(sub)
		}
	}
	return lit, fold
}

// matchUser tries the policy's patterns on t.
func matchUser(ps []userPattern, t []byte) (Phase, bool) {
	for i := range ps {
		p := &ps[i]
		if p.literal != "" {
			if p.fold {
				if indexFoldASCII(t, p.literal) < 0 {
					continue
				}
			} else if !bHas(t, p.literal) {
				continue
			}
		}
		if p.re.Match(t) {
			return p.phase, true
		}
	}
	return PhaseNone, false
}

// trimSpaceLeft removes leading spaces and tabs.
func trimSpaceLeft(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

func trimSpace(b []byte) []byte {
	b = trimSpaceLeft(b)
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// barCounter finds a progress counter "i/N" (tqdm's "123/456", fairseq's
// "850 / 4120") in b, after position from. ok is false when there is none.
func barCounter(b []byte, from int) (cur, tot int64, ok bool) {
	for i := from; i < len(b); i++ {
		if b[i] != '/' {
			j := bytes.IndexByte(b[i:], '/')
			if j < 0 {
				break
			}
			i += j
		}
		// digits before, possibly spaces (a right-aligned counter:
		// "[  100/  800]")
		j := i
		for j > 0 && i-j < 8 && b[j-1] == ' ' {
			j--
		}
		k := j
		for k > 0 && asciiDigit(b[k-1]) {
			k--
		}
		if k == j || (k > 0 && (asciiLetter(b[k-1]) || b[k-1] == '.' || b[k-1] == '/')) {
			continue
		}
		m := i + 1
		for m < len(b) && m-i <= 8 && b[m] == ' ' {
			m++
		}
		t, n, ok := scanInt(b[m:])
		if !ok || !asciiDigit(b[m]) {
			continue
		}
		if m+n < len(b) && (asciiLetter(b[m+n]) || b[m+n] == '.' || b[m+n] == '/') {
			continue
		}
		c, _, _ := scanInt(b[k:j])
		return c, t, true
	}
	return -1, -1, false
}

// bracketEpochIter reads "[e][i/N]" or "[e][N]" (spaces allowed inside the
// brackets) at the start of b, after optional spaces. It returns -1 for what
// is absent.
func bracketEpochIter(b []byte) (e, i, n int64, ok bool) {
	b = trimSpaceLeft(b)
	e, i, n = -1, -1, -1
	if len(b) == 0 || b[0] != '[' {
		return e, i, n, false
	}
	b = trimSpaceLeft(b[1:])
	v, dn, okv := scanInt(b)
	if !okv {
		return e, i, n, false
	}
	b = trimSpaceLeft(b[dn:])
	if len(b) == 0 || b[0] != ']' {
		return e, i, n, false
	}
	e = v
	// torchvision's and PaddleDetection's MetricLogger put two spaces
	// between the brackets: "Epoch: [0]  [  10/5005]".
	b = trimSpaceLeft(b[1:])
	if len(b) == 0 || b[0] != '[' {
		return e, i, n, true
	}
	b = trimSpaceLeft(b[1:])
	v, dn, okv = scanInt(b)
	if !okv {
		return e, i, n, true
	}
	b = trimSpaceLeft(b[dn:])
	if len(b) > 0 && b[0] == '/' {
		b = trimSpaceLeft(b[1:])
		t, _, okt := scanInt(b)
		if okt {
			return e, v, t, true
		}
		return e, v, -1, true
	}
	// "[e][N]": mmcv 1.x prints the val length only, at the end of validation.
	return e, -1, v, true
}

// wordInt reads "<key> N" or "<key>=N" or "<key>: N" after the first
// occurrence of key.
func wordInt(b []byte, key string) (int64, bool) {
	i := bIndex(b, key)
	if i < 0 {
		return -1, false
	}
	r := b[i+len(key):]
	if len(r) > 0 && (r[0] == '=' || r[0] == ':') {
		r = r[1:]
	}
	r = trimSpaceLeft(r)
	if len(r) == 0 || !asciiDigit(r[0]) {
		return -1, false
	}
	v, n, ok := scanInt(r)
	if !ok || (n < len(r) && r[n] == '.') {
		return -1, false // a float (HF's fractional 'epoch')
	}
	return v, true
}

// detectPhase runs the built-in detectors on one line (after its prefixes).
// t is the line, tl the line without leading spaces.
func detectPhase(t []byte, h *hitSet, r *phaseHit) bool {
	tl := trimSpaceLeft(t)
	if h.has(kwGpuguard) && explicitPhase(t, r) {
		return true
	}
	if h.has(kwFrame) && bHasPrefix(tl, "File \"") {
		return tracebackFrame(tl, r)
	}
	if bHasPrefix(tl, "│") {
		return richFrame(tl, r)
	}
	if (h.has(kwValid) || h.has(kwEvaluat) || h.has(kwTest) || h.has(kwSanity) || len(tl) > 0 && (tl[0]|0x20 == 'v' || tl[0] == 'e' || tl[0] == 't' || tl[0] == 'p' || bHasPrefix(tl, "Eval") || bHasPrefix(tl, "Predict"))) && tqdmDescPhase(tl, r) {
		// ("val epoch 3:", "eval epoch 3:", "test:", "Predicting DataLoader 0:"
		// hold no keyword.)
		return true
	}
	if h.has(kwStars) {
		switch {
		case bHas(t, "***** Running training *****"):
			*r = newPhaseHit(PhaseTrain)
			return true
		case bHas(t, "***** Running Evaluation *****"), bHas(t, "***** Running evaluation *****"),
			bHas(t, "***** Running Prediction *****"):
			*r = newPhaseHit(PhaseVal)
			return true
		}
	}
	if h.has(kwValTime) && bHas(t, "val_loss") {
		// litgpt: "Epoch 1 | iter 150 | val_loss: 2.571 | val_time: 12.306 s"
		*r = newPhaseHit(PhaseVal)
		r.done = true
		r.epoch, _ = wordInt(t, "Epoch")
		return true
	}
	if h.has(kwSanity) && bHasPrefix(tl, "Sanity Check") {
		// Lightning's sanity check runs a few validation batches before
		// training. It is validation, but not one that an "Epoch N:" bar
		// continues: the epoch bar that follows is training (done), and
		// its bar is no step.
		*r = newPhaseHit(PhaseVal)
		r.cur, r.tot, _ = barCounter(tl, 0)
		r.done = true
		return true
	}
	if (h.has(kwBatchEq) || h.has(kwEpoch) || h.has(kwTrain)) && composerLine(tl, h, r) {
		return true
	}
	return h.any(&valKeywords) && detectVal(t, tl, h, r) ||
		h.any(&trainKeywords) && detectTrain(t, tl, h, r) ||
		detectAnchored(tl, h, r) ||
		genericProgress(t, tl, h, r)
}

// explicitPhase reads "gpuguard: phase=val step=1000 epoch=2".
func explicitPhase(t []byte, r *phaseHit) bool {
	i := bIndex(t, "gpuguard: phase=")
	if i < 0 {
		return false
	}
	rest := t[i+len("gpuguard: phase="):]
	switch {
	case bHasPrefix(rest, "train"):
		*r = newPhaseHit(PhaseTrain)
		rest = rest[len("train"):]
	case bHasPrefix(rest, "val"):
		*r = newPhaseHit(PhaseVal)
		rest = rest[len("val"):]
	default:
		return false
	}
	if len(rest) > 0 && rest[0] != ' ' && rest[0] != '\t' {
		return false
	}
	r.explicit = true
	if v, ok := wordInt(rest, "step="); ok {
		r.global(v, -1)
	}
	if v, ok := wordInt(rest, "epoch="); ok {
		r.epoch = v
	}
	return true
}

func detectVal(t, tl []byte, h *hitSet, r *phaseHit) bool {
	*r = newPhaseHit(PhaseVal)
	return validationLine(t, tl, h, r) || evaluationLine(t, tl, h, r) || testLine(t, tl, h, r)
}

// validationLine reads the lines that say "valid" or "validation"
// (Lightning's bars, catalyst's, fairseq's, the start of a validation).
func validationLine(t, tl []byte, h *hitSet, r *phaseHit) bool {
	if h.has(kwValid) {
		switch {
		case bHasPrefix(tl, "Validat"):
			// Lightning: "Validation DataLoader 0:", "Validation:", 0.8's
			// "Validating:", "Validation sanity check:"; plain prints.
			r.cur, r.tot, _ = barCounter(tl, 0)
			r.done = r.tot > 0 && r.cur == r.tot || bHasPrefix(tl, "Validation sanity check")
			return true
		case bHas(t, "* Epoch (valid)"):
			// catalyst: "3/25 * Epoch (valid):   8% 2/25"
			r.epoch = leadingInt(tl)
			r.cur, r.tot, _ = barCounter(t, bIndex(t, "(valid)"))
			r.done = r.tot > 0 && r.cur == r.tot
			return true
		case bHas(t, "valid on '") || bHas(t, "valid on \""):
			// fairseq: "| epoch 001 | valid on 'valid' subset | valid_loss 9.31 ..."
			r.epoch, _ = wordInt(t, "epoch")
			if v, ok := globalField(t, h); ok {
				r.global(v, -1) // "| num_updates 1000"
			}
			r.done = bHas(t, "valid_loss") || bHas(t, "| loss ")
			return true
		case bHas(t, "begin validation on"):
			r.epoch, _ = wordInt(t, "epoch")
			return true
		case bHasPrefix(tl, "[valid"):
			return true
		case bHasPrefix(tl, "Running validation"), bHasPrefix(tl, "Start validation"), bHasPrefix(tl, "Starting validation"),
			bHasPrefix(tl, "Begin validation"), bHasPrefix(tl, "Run validation"):
			return true
		}
		// The same words as a logger's message: diffusers' "11/25/2026
		// 10:00:00 - INFO - __main__ - Running validation... ".
		if m := logMessage(tl); len(m) < len(tl) && (bHasPrefix(m, "Running validation") || bHasPrefix(m, "Validating")) {
			return true
		}
	}
	return false
}

// evaluationLine reads the evaluation forms: Composer's, MMEngine's
// Epoch(val), "[val", Hugging Face's eval dict, "[eval", "Evaluating".
func evaluationLine(t, tl []byte, h *hitSet, r *phaseHit) bool {
	if h.has(kwEvalBatch) && bHasPrefix(tl, "[Eval batch=") {
		// Composer's console logger: "[Eval batch=3/10] Eval on eval data:"
		r.cur, r.tot, _ = barCounter(tl, 0)
		r.done = r.tot > 0 && r.cur == r.tot
		return true
	}
	if (h.has(kwEpoch) || h.has(kwIter)) && (h.has(kwParenVal) || h.has(kwParenTest)) {
		// MMEngine "Epoch(val)  [1][ 50/625]", mmcv 1.x "Epoch(val) [1][625]",
		// "Epoch(test)", "Iter(val) [50/625]".
		for _, tag := range [...]string{"Epoch(val)", "Epoch(test)", "Iter(val)", "Iter(test)"} {
			if i := bIndex(t, tag); i >= 0 {
				rest := t[i+len(tag):]
				if tag[0] == 'E' {
					if e, c, n, ok := bracketEpochIter(rest); ok {
						r.epoch, r.cur, r.tot = e, c, n
						r.done = n > 0 && (c < 0 || c == n)
					}
				} else if c, n, ok := barCounter(rest, 0); ok {
					r.cur, r.tot = c, n
					r.done = n > 0 && c == n
				}
				return true
			}
		}
	}
	if h.has(kwValBracket) && bHasPrefix(tl, "[val") {
		return true
	}
	if h.has(kwEvalDict) && bHasPrefix(tl, "{'eval_") {
		r.done = true
		return true
	}
	if h.has(kwEvalBracket) && bHasPrefix(tl, "[eval") {
		return true
	}
	if h.has(kwEvaluat) {
		switch {
		case bHasPrefix(tl, "Evaluating"), bHasPrefix(tl, "Evaluation"), bHasPrefix(tl, "Running evaluation"),
			bHasPrefix(tl, "Start evaluation"), bHasPrefix(tl, "Starting evaluation"), bHasPrefix(tl, "Begin evaluation"):
			r.cur, r.tot, _ = barCounter(tl, 0)
			return true
		}
	}
	return false
}

// testLine reads inference and test forms: Detectron2's inference, timm's
// and torchvision's "Test:", Lightning's testing bar, Ultralytics' and
// other classification validation bars.
func testLine(t, tl []byte, h *hitSet, r *phaseHit) bool {
	if h.has(kwInference) {
		// Detectron2 (console "d2.evaluation.evaluator]: Inference done 11/5000."
		// and log-file "d2.evaluation.evaluator INFO: Inference done").
		switch {
		case bHas(t, "Inference done"):
			r.cur, r.tot, _ = barCounter(t, bIndex(t, "Inference done"))
			return true
		case bHas(t, "Start inference on"):
			return true
		case bHas(t, "Total inference time"):
			r.done = true
			return true
		}
	}
	if h.has(kwTest) {
		switch {
		case bHasPrefix(tl, "Test: ["), bHasPrefix(tl, "Test (EMA): ["):
			// timm and the ImageNet example: "Test: [  10/196]"
			r.cur, r.tot, _ = barCounter(tl, 0)
			return true
		case bHasPrefix(tl, "Test:"):
			// torchvision's references (MetricLogger): "Test:  [ 10/196]
			// eta: ...", "Test: EMA  [ 10/196]", and the end of the
			// evaluation: "Test:  Total time: 0:00:41", "Test:  Acc@1 ...".
			a := trimSpaceLeft(tl[len("Test:"):])
			if bHasPrefix(a, "EMA") {
				a = trimSpaceLeft(a[len("EMA"):])
			}
			switch {
			case bHasPrefix(a, "["):
				r.cur, r.tot, _ = barCounter(a, 0)
				return true
			case bHasPrefix(a, "Total time:"), bHasPrefix(a, "Acc@1"):
				r.done = true
				return true
			}
		case bHasPrefix(tl, "Testing DataLoader"), bHasPrefix(tl, "Testing:"):
			r.cur, r.tot, _ = barCounter(tl, 0)
			r.done = r.tot > 0 && r.cur == r.tot
			return true
		}
	}
	if h.has(kwImages) && bHas(t, "Class") && (bHas(t, "mAP") || bHas(t, "Box(") || bHas(t, "Instances")) {
		// Ultralytics / YOLOv5 val bar:
		// "Class     Images  Instances      Box(P          R      mAP50  mAP50-95): 100%|...| 16/16"
		if i := bIndex(t, "):"); i >= 0 {
			r.cur, r.tot, _ = barCounter(t, i)
		} else {
			r.cur, r.tot, _ = barCounter(t, 0)
		}
		r.done = r.tot > 0 && r.cur == r.tot
		return true
	}
	if h.has(kwTop1) && bHas(t, "classes") {
		r.cur, r.tot, _ = barCounter(t, bIndex(t, "top1_acc"))
		r.done = r.tot > 0 && r.cur == r.tot
		return true
	}
	return false
}

func detectTrain(t, tl []byte, h *hitSet, r *phaseHit) bool {
	*r = newPhaseHit(PhaseTrain)
	if h.has(kwEpoch) && detectEpochLine(t, tl, h, r) {
		return true
	}
	return iterLine(t, h, r) || trainWordLine(t, tl, h, r) || stepFormLine(t, tl, h, r) ||
		namedStepLine(t, tl, h, r) || lossDictLine(t, tl, h, r)
}

// iterLine reads the iteration forms: PaddleDetection's evaluation,
// MMEngine's Iter(train), Detectron2's events, mmcv's "Iter [".
func iterLine(t []byte, h *hitSet, r *phaseHit) bool {
	if h.has(kwIter) {
		if i := h.at(kwIter); i >= 5 && bHasPrefix(t[i-5:], "Eval iter:") {
			// PaddleDetection: "ppdet.engine INFO: Eval iter: 100"
			*r = newPhaseHit(PhaseVal)
			return true
		}
		if i := bIndex(t, "Iter(train)"); h.has(kwParenTrain) && i >= 0 {
			// MMEngine's iteration-based loop: "Iter(train) [  50/1000]"
			r.cur, r.tot, _ = barCounter(t, i)
			r.global(r.cur, r.tot)
			return true
		}
		if i := bIndex(t, "d2.utils.events"); i >= 0 {
			// "d2.utils.events]:  eta: 0:42:10  iter: 19  total_loss: 2.118"
			if v, ok := wordInt(t[i:], "iter:"); ok {
				r.global(v, -1)
				return true
			}
		}
		if i := bIndex(t, "Iter ["); i >= 0 && (i == 0 || t[i-1] == ' ' || t[i-1] == '\t') {
			// mmcv 1.x's iteration-based runner: "Iter [250/2930]\tlr: ..."
			if c, n, ok := barCounter(t, i); ok {
				r.cur, r.tot = c, n
				r.global(c, n)
				return true
			}
		}
	}
	return false
}

// trainWordLine reads the lines that say "train" or "training" in a
// framework's form.
func trainWordLine(t, tl []byte, h *hitSet, r *phaseHit) bool {
	if h.has(kwTrain) {
		switch {
		case bHas(t, "Starting training from iteration"):
			v, _ := wordInt(t, "iteration")
			r.global(v, -1)
			return true
		case bHasPrefix(tl, "Training epoch "):
			// NeMo 2: "Training epoch 0, iteration 496/1999 | ... | global_step: 496";
			// the iteration counts within the epoch.
			r.epoch, _ = wordInt(tl, "epoch")
			r.cur, r.tot, _ = barCounter(tl, 0)
			r.inEpoch(r.cur, r.tot)
			if v, ok := globalField(t, h); ok {
				r.global(v, -1)
			}
			return true
		case bHasPrefix(tl, "Starting training"), bHasPrefix(tl, "Start training"), bHasPrefix(tl, "Running training"),
			bHasPrefix(tl, "Begin training"), bHas(t, "begin training epoch"):
			r.epoch, _ = wordInt(t, "epoch")
			return true
		case bHasPrefix(tl, "Training:"), bHasPrefix(tl, "Training DataLoader"):
			r.cur, r.tot, _ = barCounter(tl, 0)
			return true
		case bHasPrefix(tl, "Train") && richLabel(tl):
			// A rich progress bar labelled for training: "Training
			// ━━━━━━━━━━╺━━━━━━━━━  35% 0:00:12" (its counter, when a
			// column shows one, is not known to be a step).
			r.cur, r.tot, _ = barCounter(tl, 0)
			return true
		case bHasPrefix(tl, "[train"):
			// "[train] step 10/100 loss=2.31"
			if v, tot, key := namedStep(t, h); key != keyNone {
				r.global(v, tot)
			}
			r.epoch = namedEpoch(t, h)
			r.nan = h.has(kwNaN) && nanLoss(t)
			return true
		case bHasPrefix(tl, "Train: "):
			// timm: "Train: 3 [ 100/1251 (  8%)]  Loss: ..."
			r.epoch, _ = wordInt(tl, "Train:")
			r.cur, r.tot, _ = barCounter(tl, 0)
			r.inEpoch(r.cur, r.tot)
			return true
		case bHas(t, "train/loss"):
			// "train/loss/con 0.11 / train/loss/dyn 4.87" style metric lines
			if v, tot, key := namedStep(t, h); key != keyNone {
				r.global(v, tot)
			}
			return true
		}
	}
	return false
}

// stepFormLine reads DeepSpeed's step line, Paddle's hapi steps, the
// "Steps:" bar and the optimization-steps banner.
func stepFormLine(t, tl []byte, h *hitSet, r *phaseHit) bool {
	if h.has(kwSkipped) {
		// DeepSpeed: "[Rank 0] step=120, skipped=5, lr=[3e-05]"
		if v, ok := wordInt(t, "step="); ok && bHas(t, ", skipped=") {
			r.global(v, -1)
			return true
		}
	}
	if h.has(kwStep) {
		if bHasPrefix(tl, "step ") && hapiStep(tl, r) {
			return true
		}
		if bHasPrefix(tl, "Steps:") {
			// diffusers' and Accelerate scripts' bar over the run's
			// optimization steps: "Steps:  12%|█▏ | 120/1000 [01:23<10:00, 1.4it/s, loss=0.1]"
			if c, n, ok := barCounter(tl, 0); ok {
				r.cur, r.tot = c, n
				r.global(c, n)
				r.nan = h.has(kwNaN) && nanLoss(t)
				return true
			}
		}
		if v, ok := optimizationSteps(t, h); ok {
			// Hugging Face's and Accelerate's banner: the total of the
			// run's training bar, which counts optimization steps.
			*r = newPhaseHit(PhaseNone)
			r.banner, r.tot = true, v
			return true
		}
	}
	return false
}

// namedStepLine reads a line with a named step field (step, iteration,
// update, global_step, num_updates) and a counter or a loss.
func namedStepLine(t, tl []byte, h *hitSet, r *phaseHit) bool {
	if h.has(kwStep) || h.has(kwIter) || h.has(kwUpdate) {
		if v, tot, key := namedStep(t, h); key != keyNone {
			switch {
			case tot >= 0 || lossNumber(t):
				// A training progress line: "step 120/500 loss=2.31",
				// "INFO:__main__:step 120/500 loss=2.31", "Step 120 | loss 2.31",
				// "iter 100: loss 2.34", "step 8 | epoch 0 | loss 0.78",
				// Megatron's "iteration      100/  500000 | ... | lm loss: 7.1E+00 |".
				r.global(v, tot)
				r.epoch = namedEpoch(t, h)
				r.nan = h.has(kwNaN) && nanLoss(t)
				switch {
				case bHas(t, " loss at iteration ") && bHas(t, " | "):
					// Megatron-LM prints " validation loss at iteration 1000 |
					// lm loss value: ... |" once its validation is over, and
					// trains on: the validation ended (the training step
					// is the iteration it ran at).
					r.phase = PhaseTrain
					return true
				case startsWithStep(tl) && bHas(t, ", val time: "):
					// litgpt's "iter 600: val loss 2.5710, val time: 12306.45
					// ms" ends the validation that "Validating ..." began;
					// its iter counts micro-batches, not the optimizer steps
					// its training lines show ("iter 600 step 150").
					r.step, r.stepTot, r.kind = -1, -1, kindNone
					return true
				}
				if mentionsEval(t) && (!startsWithStep(tl) || indexFoldASCII(t, "train") < 0) {
					// "val step=10 loss=2.2", torchtune's "Step 220 | val_loss:0.84":
					// the training step, not a training line (nanoGPT's "step
					// 100: train loss 2.3, val loss 2.4" is one).
					r.phase = PhaseNone
				}
				return true
			case key == keyGlobalStep && (bHas(t, "/global_step=") || bHas(t, "Continuing training from global step")):
				// DeepSpeed's throughput line "epoch=0/micro_step=240/global_step=120, RunningAvgSamplesPerSec=...",
				// Hugging Face's "Continuing training from global step 500".
				*r = newPhaseHit(PhaseNone)
				r.global(v, -1)
				return true
			}
		}
	}
	return false
}

// lossDictLine reads Hugging Face's log dict and DeepSpeed's overflow line.
func lossDictLine(t, tl []byte, h *hitSet, r *phaseHit) bool {
	if h.has(kwLossDict) && (bHasPrefix(tl, "{'loss'") || afterBar(t, h.at(kwLossDict))) {
		// Hugging Face Trainer: "{'loss': 4.9021, 'learning_rate': 0.0005, 'epoch': 0.03}";
		// with the step where the job logs it ("'step': 40").
		if h.has(kwStep) {
			if v, tot, key := namedStep(t, h); key >= keyStep {
				r.global(v, tot)
			}
		}
		r.nan = h.has(kwNaN) && nanLoss(t)
		r.lossDict = true
		return true
	}
	if h.has(kwOverflow) && bHas(t, "Skipping step") {
		// DeepSpeed fp16 loss scaling: "OVERFLOW! Rank 0 Skipping step."
		return true
	}
	return false
}

// startsWithStep says whether tl starts with a step or iteration counter
// ("step 100: train loss 2.3, val loss 2.4" is nanoGPT's training line).
func startsWithStep(tl []byte) bool {
	return len(tl) >= 4 && (eqFoldASCII(tl[:4], "step") || eqFoldASCII(tl[:4], "iter"))
}

// detectEpochLine handles the many "Epoch ..." forms.
func detectEpochLine(t, tl []byte, h *hitSet, r *phaseHit) bool {
	*r = newPhaseHit(PhaseTrain)
	nan := h.has(kwNaN) && nanLoss(t)
	r.nan = nan
	// Ultralytics header "      Epoch    GPU_mem   box_loss ..." (YOLOv5: gpu_mem).
	if h.has(kwGPUMem) && bHasPrefix(tl, "Epoch") {
		return true
	}
	if espnetLine(t, h.at(kwEpoch), r) {
		return true
	}
	if h.has(kwParenTrain) {
		if i := bIndex(t, "Epoch(train)"); i >= 0 {
			// MMEngine: "Epoch(train)  [2][3150/7329]  lr: ..."
			if e, c, n, ok := bracketEpochIter(t[i+len("Epoch(train)"):]); ok {
				r.epoch, r.cur, r.tot = e, c, n
				r.inEpoch(c, n)
			}
			return true
		}
		if i := bIndex(t, "* Epoch (train)"); i >= 0 {
			// catalyst: "3/25 * Epoch (train): 100% 118/118"
			r.epoch = leadingInt(tl)
			r.cur, r.tot, _ = barCounter(t, i)
			r.inEpoch(r.cur, r.tot)
			return true
		}
	}
	// "Epoch" as a word, at most a few occurrences per line, from the first
	// occurrence of "epoch" in any case.
	for off, tries := h.at(kwEpoch), 0; tries < 4; tries++ {
		i := off
		if !bHasPrefix(t[off:], "Epoch") {
			if i = bIndex(t[off:], "Epoch"); i < 0 {
				break
			}
			i += off
		}
		off = i + len("Epoch")
		if i > 0 {
			switch t[i-1] {
			case ' ', '\t', '|', ']', '>', ':', '"', '\'':
			default:
				continue
			}
		}
		if epochForm(t[i+len("Epoch"):], t, h, r) {
			return true
		}
	}
	// fairseq: "| epoch 001:    850 / 4120 loss=10.812, ... num_updates=847"
	// and the tqdm form "epoch 001:  13%|".
	// (The first "epoch " is not before the first "epoch" in any case.)
	if i := bIndexFrom(t, h.at(kwEpoch), "epoch "); i >= 0 && (i == 0 || t[i-1] == ' ' || t[i-1] == '|') {
		rest := t[i+len("epoch "):]
		v, n, ok := scanInt(rest)
		// A counter or a bar follows the colon: "epoch 3: {'accuracy': 0.8}"
		// (Accelerate's examples) is a summary, not a progress line.
		colon := ok && asciiDigit(rest[0]) && n < len(rest) && rest[n] == ':' &&
			len(trimSpaceLeft(rest[n+1:])) > 0 && asciiDigit(trimSpaceLeft(rest[n+1:])[0])
		if !colon && ok && asciiDigit(rest[0]) && n+1 < len(rest) && rest[n] == ' ' {
			// "| epoch 001    850 / 4120": a counter right after the epoch
			after := trimSpaceLeft(rest[n:])
			if _, m, ok2 := scanInt(after); ok2 && len(after) > 0 && asciiDigit(after[0]) && bHasPrefix(trimSpaceLeft(after[m:]), "/") {
				colon = true
			}
		}
		if colon {
			r.epoch = v
			if c, tot, ok := barCounter(rest, n+1); ok {
				r.cur, r.tot = c, tot
				r.inEpoch(c, tot)
			}
			if v, ok := globalField(t, h); ok {
				r.global(v, -1) // num_updates
			}
			return true
		}
	}
	return false
}

// epochForm parses what follows the word "Epoch" (rest); t is the whole line
// and r the hit to fill in.
func epochForm(rest, t []byte, h *hitSet, r *phaseHit) bool {
	if len(rest) > 0 && rest[0] == ':' {
		// "Epoch: [3][2417/5005]" (ImageNet example, torch7)
		if e, c, n, ok := bracketEpochIter(rest[1:]); ok {
			r.epoch, r.cur, r.tot = e, c, n
			r.inEpoch(c, n)
			return true
		}
		return false
	}
	if len(rest) == 0 || rest[0] != ' ' {
		return false
	}
	rest = trimSpaceLeft(rest)
	if len(rest) == 0 {
		return false
	}
	if rest[0] == '[' {
		if e, c, n, ok := bracketEpochIter(rest); ok && c >= 0 {
			// mmcv 1.x: "Epoch [7][250/2930]   lr: ..."
			r.epoch, r.cur, r.tot = e, c, n
			r.inEpoch(c, n)
			return true
		}
		if c, _, ok := barCounter(rest, 0); ok {
			// "Epoch [1/10], Step [100/600], Loss: ..." tutorials: the
			// step is the batch index within the epoch (of len(loader)).
			r.epoch = c
			if i := bIndex(t, "Step ["); i >= 0 {
				if sc, sn, ok := barCounter(t, i); ok {
					r.inEpoch(sc, sn)
				}
			}
			return true
		}
		return false
	}
	v, n, ok := scanInt(rest)
	if !ok || !asciiDigit(rest[0]) {
		return false
	}
	r.epoch = v
	after := rest[n:]
	switch {
	case len(after) > 0 && after[0] == ':':
		// Lightning: "Epoch 3:  45%|####  | 123/456 [00:12<00:30, ...]":
		// the batch within the epoch, and the training step where the
		// bar's metrics show it (NeMo's "global_step=794.0", a logged
		// "step=1200", a script's own "[step 100, loss=0.12]").
		a := trimSpaceLeft(after[1:])
		if len(a) == 0 || !(asciiDigit(a[0]) || a[0] == '|') {
			return false
		}
		r.combined = true
		r.cur, r.tot, _ = barCounter(a, 0)
		r.inEpoch(r.cur, r.tot)
		if s, st, key := namedStep(a, h); key != keyNone {
			r.global(s, st)
		}
		return true
	case len(after) > 0 && after[0] == '/':
		// Keras and custom loops: "Epoch 3/10"; custom loops print the
		// training step on it ("Epoch 3/10 step 120/500 loss=2.31"),
		// Lightning's rich bar the batch within the epoch ("Epoch 3/9
		// ━━━━━━━━━━ 123/456 0:00:12 • 0:00:30 4.51it/s v_num: 3").
		_, m, _ := scanInt(after[1:])
		a := after[1+m:]
		if s, st, key := namedStep(a, h); key != keyNone {
			r.global(s, st)
		} else if barGlyph(a) {
			r.cur, r.tot, _ = barCounter(a, 0)
			r.inEpoch(r.cur, r.tot)
		}
		return true
	case len(after) > 0 && after[0] == ',':
		// Lightning's checkpoint callback: "Epoch 0, global step 499:
		// 'val_loss' reached 0.52 (best 0.52), saving model to ..." after a
		// validation or at an epoch's end: a step, not a phase.
		if s, ok := globalField(after, h); ok {
			r.phase = PhaseNone
			r.global(s, -1)
			return true
		}
	case bHasPrefix(after, " | iter "):
		// litgpt: "Epoch 1 | iter 142 step 142 | loss train: 2.417"
		if s, st, key := namedStep(after, h); key != keyNone {
			r.global(s, st)
		}
		return true
	case barGlyph(after):
		// Lightning's rich bar without max_epochs: "Epoch 3 ━━━━━━ 123/456 ..."
		r.cur, r.tot, _ = barCounter(after, 0)
		r.inEpoch(r.cur, r.tot)
		return r.cur >= 0
	}
	return false
}

// barGlyph says whether b starts (after spaces) with a bar drawn in box or
// block characters (rich's "━", tqdm's "█"), not in ASCII.
func barGlyph(b []byte) bool {
	b = trimSpaceLeft(b)
	return len(b) > 0 && b[0] >= 0x80
}

// detectAnchored recognises lines by their shape at the start, with no
// keyword: Ultralytics' training row and results row, and the Keras progress
// bar. tl has no leading spaces.
func detectAnchored(tl []byte, h *hitSet, r *phaseHit) bool {
	if len(tl) == 0 {
		return false
	}
	switch {
	case bHasPrefix(tl, "eval model::"):
		// PaddleOCR: "eval model:: 40%|████      | 20/50 [00:02<00:03,  9.51it/s]"
		*r = newPhaseHit(PhaseVal)
		r.cur, r.tot, _ = barCounter(tl, 0)
		r.done = r.tot > 0 && r.cur == r.tot
		return true
	case tl[0] == 'e':
		return composerLine(tl, h, r) // "eval           Batch    450:  30%|"
	case bHasPrefix(tl, "Eval begin"):
		// Paddle's Model.fit and Model.evaluate: "Eval begin..."
		*r = newPhaseHit(PhaseVal)
		return true
	}
	if asciiDigit(tl[0]) {
		e, n1, _ := scanInt(tl)
		if n1 < len(tl) && tl[n1] == '|' {
			return torchtuneBar(tl, e, n1, r)
		}
		if n1 < len(tl) && tl[n1] == '%' {
			// SpeechBrain's training bar, a bare tqdm bar whose postfix
			// shows the running training loss: "100%|██████████| 1200/1200
			// [05:12<00:00,  3.84it/s, train_loss=1.23]"; the position in
			// the epoch. Its validation bar is bare (Classifier.bareTrain).
			if !bHas(tl[max(0, len(tl)-40):], ", train_loss=") {
				return false
			}
			if cur, tot, ok := bareBar(tl); ok {
				*r = newPhaseHit(PhaseTrain)
				r.cur, r.tot = cur, tot
				r.inEpoch(cur, tot)
				r.bareTrain = true
				return true
			}
			return false
		}
		if n1 >= len(tl) || tl[n1] != '/' {
			return false
		}
		if bHasPrefix(tl[n1:], "/Unknown ") {
			// Keras 3 without a known number of steps: "     17/Unknown 3s 50ms/step - loss: 0.5"
			*r = newPhaseHit(PhaseTrain)
			r.cur = e
			r.inEpoch(e, -1)
			return true
		}
		tot, n2, ok := scanInt(tl[n1+1:])
		if !ok || !asciiDigit(tl[n1+1]) {
			return false
		}
		rest := tl[n1+1+n2:]
		if len(rest) > 1 && rest[0] == ' ' && (barGlyph(rest[1:2]) || bHasPrefix(rest, " - ") && len(rest) > 3 && asciiDigit(rest[3])) {
			// Keras 3: " 32/100 ━━━━━━━━━━━━━━━━━━━━ 3s 50ms/step - loss: 0.52",
			// and with verbose=2 "100/100 - 5s - 50ms/step - loss: 0.4":
			// the batch within the epoch ("Epoch 2/10" before it). A
			// "val_loss" at the end of the epoch's row is a column of it.
			*r = newPhaseHit(PhaseTrain)
			r.cur, r.tot = e, tot
			r.inEpoch(e, tot)
			r.nan = h.has(kwNaN) && nanLoss(tl)
			return true
		}
		if len(rest) > 1 && rest[0] == ' ' && rest[1] == '[' {
			// Keras: "123/456 [=====>....] - ETA: 10s - loss: 0.3"
			if len(rest) > 2 && (rest[2] == '=' || rest[2] == '>' || rest[2] == '.') {
				*r = newPhaseHit(PhaseTrain)
				r.cur, r.tot = e, tot
				r.inEpoch(e, tot)
				r.nan = h.has(kwNaN) && nanLoss(tl)
				return true
			}
			return false
		}
		// Ultralytics: "     88/300      8.02G     0.9096 ...   640: 100%|...| 57/57"
		s := trimSpaceLeft(rest)
		if len(s) == len(rest) {
			return false
		}
		i := 0
		for i < len(s) && (asciiDigit(s[i]) || s[i] == '.') {
			i++
		}
		if i == 0 || i >= len(s) || s[i] != 'G' || (i+1 < len(s) && s[i+1] != ' ') {
			return false
		}
		*r = newPhaseHit(PhaseTrain)
		r.epoch = e
		if j := bytes.IndexByte(s, '|'); j >= 0 {
			r.cur, r.tot, _ = barCounter(s, j)
		} else if j := bytes.IndexByte(s, '%'); j >= 0 {
			r.cur, r.tot, _ = barCounter(s, j)
		}
		r.inEpoch(r.cur, r.tot)
		return true
	}
	if tl[0] == 'a' && bHasPrefix(tl, "all ") {
		// Ultralytics results row: "all        251      33612      0.812 ..."
		s := trimSpaceLeft(tl[3:])
		if len(s) > 0 && asciiDigit(s[0]) {
			_, n, _ := scanInt(s)
			s2 := trimSpaceLeft(s[n:])
			if len(s2) > 0 && asciiDigit(s2[0]) && len(s2) < len(s[n:]) {
				*r = newPhaseHit(PhaseVal)
				r.done = true
				return true
			}
		}
	}
	return false
}

// leadingInt reads the integer at the start of b (catalyst's "3/25 * Epoch"),
// or -1.
func leadingInt(b []byte) int64 {
	v, _, ok := scanInt(b)
	if !ok || len(b) == 0 || !asciiDigit(b[0]) {
		return -1
	}
	return v
}

// nanLoss reports whether a progress line prints a NaN loss:
// "loss: nan", "loss=nan", "'loss': nan", "loss_cls: nan", "Loss is NaN".
func nanLoss(t []byte) bool {
	for off := 0; off < len(t); {
		i := indexFoldASCII(t[off:], "nan")
		if i < 0 {
			return false
		}
		i += off
		off = i + 3
		// a word of its own
		if i > 0 && (asciiLetter(t[i-1]) || asciiDigit(t[i-1]) || t[i-1] == '_') {
			continue
		}
		if i+3 < len(t) && asciiLetter(t[i+3]) {
			continue
		}
		// a loss key shortly before it
		lo := i - 48
		if lo < 0 {
			lo = 0
		}
		seg := t[lo:i]
		li := lastIndexFoldASCII(seg, "loss")
		if li < 0 {
			continue
		}
		between := seg[li+4:]
		// "loss: nan", "loss=nan", "loss': nan", "loss_cls: nan", "loss is nan"
		if len(between) <= 16 && !bytes.ContainsAny(between, ",|") {
			return true
		}
	}
	return false
}

// lastIndexFoldASCII is indexFoldASCII from the end.
func lastIndexFoldASCII(b []byte, s string) int {
	for i := len(b) - len(s); i >= 0; i-- {
		if asciiFold[b[i]] == s[0] && eqFoldASCII(b[i:i+len(s)], s) {
			return i
		}
	}
	return -1
}

// logMessage is the message of a line written by a logger: what follows a
// level name near its start ("11/25/2026 10:00:00 - INFO - __main__ - msg",
// "INFO:__main__:msg", "[2026-11-25 10:00:00,123] [    INFO] - msg",
// "[host] 2026-11-25 10:00:00,123 (trainer:243) INFO: msg", "ppdet.engine
// INFO: msg"), or t itself.
func logMessage(t []byte) []byte {
	i := bIndex(t[:min(len(t), 120)], "INFO")
	if i < 0 {
		return t
	}
	r := t[i+len("INFO"):]
	switch {
	case bHasPrefix(r, "] - "):
		return r[len("] - "):]
	case bHasPrefix(r, ": "):
		return r[len(": "):]
	case bHasPrefix(r, " - "):
		// "INFO - __main__ - msg": a logger name, then the message
		r = r[len(" - "):]
		if j := bIndex(r[:min(len(r), 80)], " - "); j > 0 && bytes.IndexByte(r[:j], ' ') < 0 {
			return r[j+len(" - "):]
		}
		return r
	case bHasPrefix(r, ":"):
		// "INFO:__main__:msg"
		r = r[1:]
		if j := bytes.IndexByte(r[:min(len(r), 80)], ':'); j > 0 && bytes.IndexByte(r[:j], ' ') < 0 {
			return r[j+1:]
		}
	}
	return t
}

// richLabel says whether tl is a rich progress bar whose label is a word or
// two (and dots): "Training ━━━━━━━╺━━━━━  35% 0:00:12".
func richLabel(tl []byte) bool {
	i := 0
	for i < len(tl) && i < 40 && (asciiLetter(tl[i]) || tl[i] == ' ' || tl[i] == '.') {
		i++
	}
	return i < len(tl) && i > 0 && tl[i-1] == ' ' && bHasPrefix(tl[i:], "━")
}

// hapiStep reads Paddle's high-level API (Model.fit, Model.evaluate)
// progress line "step  10/938 [====>...] - loss: 0.52 - acc: 0.81 - 20ms/step"
// or, with verbose=2, "step 7/7 - loss: 0.0935 - 580ms/step": the batch
// within the epoch ("Epoch 1/5" before it) or within an evaluation ("Eval
// begin..." before it), so the line is in the phase in effect.
func hapiStep(tl []byte, r *phaseHit) bool {
	a := trimSpaceLeft(tl[len("step "):])
	c, n, ok := scanInt(a)
	if !ok || len(a) == 0 || !asciiDigit(a[0]) || n >= len(a) || a[n] != '/' {
		return false
	}
	tot, m, ok := scanInt(a[n+1:])
	if !ok || !asciiDigit(a[n+1]) {
		return false
	}
	rest := a[n+1+m:]
	if !bHasPrefix(rest, " [=") && !bHasPrefix(rest, " [.") && !bHasPrefix(rest, " [>") && !bHasPrefix(rest, " - ") {
		return false
	}
	*r = newPhaseHit(PhaseNone)
	r.follow = true
	r.cur, r.tot = c, tot
	r.inEpoch(c, tot)
	return true
}

// espnetLine reads ESPnet's trainer lines: "1epoch:train:101-200batch:
// iter_time=..., loss=..." (the batches of the epoch logged so far),
// "2/100epoch started" and the epoch's summary "1epoch results: [train] ...
// [valid] loss=..." (which reports on a validation that is over: no phase).
// i is where the line's first "epoch" (in any case) is.
func espnetLine(t []byte, i int, r *phaseHit) bool {
	if i <= 0 || t[i] != 'e' || !asciiDigit(t[i-1]) {
		return false
	}
	j := i
	for j > 0 && asciiDigit(t[j-1]) {
		j--
	}
	e, _, _ := scanInt(t[j:i])
	rest := t[i+len("epoch"):]
	switch {
	case bHasPrefix(rest, ":train:"):
		a := rest[len(":train:"):]
		_, n, ok := scanInt(a)
		if !ok || n >= len(a) || a[n] != '-' {
			return false
		}
		b, m, ok := scanInt(a[n+1:])
		if !ok || !bHasPrefix(a[n+1+m:], "batch") {
			return false
		}
		*r = newPhaseHit(PhaseTrain)
		r.epoch = e
		r.inEpoch(b, -1)
		return true
	case bHasPrefix(rest, " started"):
		if j == 0 || t[j-1] != '/' {
			return false
		}
		k := j - 1
		for k > 0 && asciiDigit(t[k-1]) {
			k--
		}
		v, _, ok := scanInt(t[k : j-1])
		if !ok || k == j-1 {
			return false
		}
		*r = newPhaseHit(PhaseTrain)
		r.epoch = v
		return true
	case bHasPrefix(rest, " results: ["):
		*r = newPhaseHit(PhaseNone)
		return true
	}
	return false
}

// composerLine reads MosaicML Composer's progress: its console logger's
// "[epoch=1][batch=16/100]:" (training, the batch within the epoch) and
// "[batch=16/100]:" (training by batches: the step); its progress bars,
// labelled with the dataloader's name padded to 15 characters and counted in
// batches ("ba/s"): "train          Epoch   0:  45%|...| 23/50 [..., 1.90ba/s,
// loss/train/total=2.3]" or, by batches, "train                          45%|...|
// 450/1000"; any other label is an evaluation: "eval           Epoch   0:",
// "eval           Batch 450:".
func composerLine(tl []byte, h *hitSet, r *phaseHit) bool {
	if h.has(kwBatchEq) {
		a := tl
		e := int64(-1)
		if bHasPrefix(a, "[epoch=") {
			v, n, ok := scanInt(a[len("[epoch="):])
			if !ok || !bHasPrefix(a[len("[epoch=")+n:], "]") {
				return false
			}
			e, a = v, a[len("[epoch=")+n+1:]
		}
		if bHasPrefix(a, "[batch=") {
			c, tot, ok := barCounter(a, 0)
			if !ok {
				return false
			}
			*r = newPhaseHit(PhaseTrain)
			r.cur, r.tot = c, tot
			if e >= 0 {
				r.epoch = e
				r.inEpoch(c, tot)
			} else {
				r.global(c, tot)
			}
			return true
		}
	}
	// A label (a lower-case name, two spaces or more after it), then
	// batches per second on the bar.
	if len(tl) == 0 || !(tl[0] >= 'a' && tl[0] <= 'z') {
		return false
	}
	i := 0
	for i < len(tl) && i < 40 && tl[i] != ' ' {
		i++
	}
	if i+2 > len(tl) || tl[i+1] != ' ' || !bHas(tl[i:], "ba/s") {
		return false
	}
	label, a := tl[:i], trimSpaceLeft(tl[i:])
	var word string
	for _, w := range [...]string{"Epoch", "Batch"} {
		if bHasPrefix(a, w) {
			word = w
		}
	}
	if word != "" {
		v, n, ok := scanInt(trimSpaceLeft(a[len(word):]))
		if !ok {
			return false
		}
		rest := trimSpaceLeft(a[len(word):])[n:]
		if !bHasPrefix(rest, ":") {
			return false
		}
		a = rest[1:]
		if string(label) == "train" {
			*r = newPhaseHit(PhaseTrain)
			if word == "Epoch" {
				r.epoch = v
			}
		} else {
			*r = newPhaseHit(PhaseVal)
		}
	} else if string(label) == "train" {
		*r = newPhaseHit(PhaseTrain)
	} else {
		return false
	}
	j := bytes.IndexByte(a, '|')
	if j < 0 {
		return false
	}
	r.cur, r.tot, _ = barCounter(a, j)
	switch {
	case r.phase == PhaseVal:
		r.done = r.tot > 0 && r.cur == r.tot
	case word == "Epoch":
		r.inEpoch(r.cur, r.tot)
	case word == "":
		r.global(r.cur, r.tot)
	}
	return true
}

// torchtuneBar reads torchtune's training bar, whose description is
// "epoch|global step|Loss: value": "1|12|Loss: 2.3456:  12%|█▏  | 12/100
// [00:30<03:40,  2.45s/it]" (the bar counts the epoch's optimizer steps).
// e is the first number of tl and n1 its length.
func torchtuneBar(tl []byte, e int64, n1 int, r *phaseHit) bool {
	a := tl[n1+1:]
	g, n, ok := scanInt(a)
	if !ok || len(a) == 0 || !asciiDigit(a[0]) || !bHasPrefix(a[n:], "|Loss: ") {
		return false
	}
	*r = newPhaseHit(PhaseTrain)
	r.epoch = e
	if j := bytes.IndexByte(a[n+1:], '|'); j >= 0 {
		r.cur, r.tot, _ = barCounter(a[n+1:], j)
	}
	r.global(g, -1)
	return true
}

// tracebackFrame reads a traceback's frame line, `File "/x/training.py",
// line 2101, in evaluate_and_print_results`: the function, when it names a
// phase.
func tracebackFrame(tl []byte, r *phaseHit) bool {
	i := bIndex(tl, ", in ")
	if i < 0 {
		return false
	}
	name := trimSpace(tl[i+len(", in "):])
	path := []byte(nil)
	if q := bytes.IndexByte(tl[len("File \""):], '"'); q >= 0 {
		path = tl[len("File \"") : len("File \"")+q]
	}
	return frameNamePhase(path, name, r)
}

// frameNamePhase reads a frame's function name and module path (see
// tracebackFrame).
func frameNamePhase(path, name []byte, r *phaseHit) bool {
	// Functions that run only while validating, or only while training, in
	// the frameworks' code: a traceback that passes through one (the
	// deepest, printed last, decides) shows the phase the failure happened
	// in where the framework printed no marker before (Megatron-LM's
	// evaluate_and_print_results, nanoGPT's estimate_loss, torchtitan's and
	// torchtune's validate, Keras' evaluate). A switch, not a map: a map
	// made the hot path measurably slower (BenchmarkClassifierLine).
	switch string(name) {
	case "evaluate", "evaluation_loop", "prediction_loop", "prediction_step", // Hugging Face, Keras, torchvision
		"evaluate_and_print_results",                                         // Megatron-LM
		"estimate_loss",                                                      // nanoGPT
		"validate", "validation_step", "_evaluation_step", "evaluation_step", // timm, litgpt, torchtitan, torchtune; Lightning
		"test_step", "predict_step", "val_step", "eval_step", // Lightning, Keras, MMEngine
		"validate_one_epoch", "_fit_valid", "evaluate_batch", // ESPnet; SpeechBrain
		"inference_on_dataset", "log_validation", "run_validation", // Detectron2; diffusers
		"_eval_loop", "_eval_with_loader": // Composer; PaddleDetection
		*r = newPhaseHit(PhaseVal)
	case "training_step", "train_step", "train_one_epoch", "train_epoch", // Lightning, Hugging Face, Keras, ESPnet, torchvision
		"backward", "optimizer_step", // torch.autograd; Lightning
		"_fit_train", "fit_batch": // SpeechBrain
		*r = newPhaseHit(PhaseTrain)
	default:
		p := framePhase(path, name)
		if p == PhaseNone {
			return false
		}
		*r = newPhaseHit(p)
	}
	return true
}
