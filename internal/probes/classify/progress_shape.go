package classify

import "bytes"

// Progress read by shape. After the frameworks' own forms (phase.go), a line
// is read for the few shapes every training loop's prints take, whatever
// the framework:
//
//   - a line (or a logger's message) that starts with a phase's word —
//     train, training; val, valid, validate, validation, validating, eval,
//     evaluate, evaluation, evaluating, test, testing, predict, prediction,
//     predicting — as a word of its own (not
//     `val_loss`, not `training_args`), then a counter (`[10/25]`,
//     `10/25`) or a metric (`loss`, `key=value`): a line of that phase;
//   - the same word with a word that ends it — done, finished, complete,
//     completed, ended, end, summary, results — ends a validation:
//     training goes on after it (phaseHit.ends), so a failure after a
//     finished validation is not put in validation;
//   - a progress bar whose description holds a validation word ("valid
//     epoch 3:  12%|") is validation, whatever else it says;
//   - a glog or absl record's message is read as the line;
//   - a counter row whose loss is named for its phase ("[5][ 100/ 800]
//     train loss 0.33"; "train loss" wins over "val loss" on one row);
//   - an epoch with a batch counter and a loss (`Epoch 7, batch 350/1200,
//     loss 1.07`): training, at a batch within the epoch (the batch
//     counter restarts when the epoch advances).
//
// A training line that ends ("training done") is no phase line: the run
// is over, and the phase in effect stays.

// phaseWords are the leading words of a phase's lines.
var phaseWords = [...]struct {
	w string
	p Phase
}{
	{"training", PhaseTrain}, {"train", PhaseTrain},
	{"validation", PhaseVal}, {"validating", PhaseVal}, {"validate", PhaseVal}, {"valid", PhaseVal}, {"val", PhaseVal},
	{"evaluation", PhaseVal}, {"evaluating", PhaseVal}, {"evaluate", PhaseVal}, {"eval", PhaseVal},
	{"testing", PhaseVal}, {"test", PhaseVal},
	{"predicting", PhaseVal}, {"prediction", PhaseVal}, {"predict", PhaseVal},
}

// phaseWordStart says which bytes start a word of phaseWords, in either case.
var phaseWordStart = func() (b [256]bool) {
	for _, pw := range phaseWords {
		b[pw.w[0]], b[pw.w[0]-'a'+'A'] = true, true
	}
	return b
}()

// endWords end a phase.
var endWords = [...]string{"done", "finished", "complete", "completed", "ended", "end", "summary", "results", "metrics"}

// genericProgress reads the shapes above; it is the last detector tried.
func genericProgress(t, tl []byte, h *hitSet, r *phaseHit) bool {
	m := decoration(logMessage(glogMessage(tl)))
	if phaseWordLine(m, r) || startLine(m, r) {
		return true
	}
	return h.has(kwEpoch) && epochBatchLine(m, r) || phaseMetricLine(m, r)
}

// phaseMetricLine reads a counter row whose metric names its phase: "[5][
// 100/ 800] train loss 0.3311", "step 30/100 | eval loss 0.91". A row that
// names the training loss is training (a summary may show the validation
// loss beside it); one that names only another phase's loss is that phase.
func phaseMetricLine(m []byte, r *phaseHit) bool {
	if bytes.IndexByte(m, '/') < 0 {
		return false // no counter
	}
	i := spaceLoss(m)
	if i < 0 {
		return false
	}
	if _, _, ok := barCounter(m, 0); !ok {
		return false
	}
	var p Phase
	for i >= 0 {
		w := i
		for w > 0 && asciiLetter(m[w-1]) {
			w--
		}
		word := m[w:i]
		for _, pw := range phaseWords {
			if eqFoldASCII(word, pw.w) {
				if pw.p == PhaseTrain || p == PhaseNone {
					p = pw.p
				}
			}
		}
		k := spaceLoss(m[i+1:])
		if k < 0 {
			break
		}
		i += 1 + k
	}
	if p == PhaseNone {
		return false
	}
	*r = newPhaseHit(p)
	return true
}

// spaceLoss is the index of the first " loss" or " Loss" in m, or -1: one
// search for the bytes the two share (their first, a space, is the commonest
// byte of a log line, a poor start for a search).
func spaceLoss(m []byte) int {
	for off := 0; ; {
		j := bIndex(m[off:], "oss")
		if j < 0 {
			return -1
		}
		if i := off + j - 2; i >= 0 && m[i] == ' ' && (m[i+1] == 'l' || m[i+1] == 'L') {
			return i
		}
		off += j + 1
	}
}

// decoration removes the arrows and rules a script puts before its
// messages: "=> Evaluating on test set", "***** eval metrics *****",
// "--- train ---", "# val".
func decoration(m []byte) []byte {
	i := 0
	for i < len(m) && (m[i] == '=' || m[i] == '>' || m[i] == '-' || m[i] == '*' || m[i] == '#' || m[i] == '~' || m[i] == ' ' || m[i] == '\t') {
		i++
	}
	return m[i:]
}

// startVerbs start a phase or an epoch: "Starting epoch 3", "Begin epoch 2".
var startVerbs = [...]string{"starting ", "start ", "beginning ", "begin ", "running "}

// startLine reads "Starting epoch 3" (training: an epoch starts) and the
// same verbs before a phase's word ("Running evaluation", "Begin testing").
func startLine(m []byte, r *phaseHit) bool {
	if len(m) == 0 || asciiFold[m[0]] != 's' && asciiFold[m[0]] != 'b' && asciiFold[m[0]] != 'r' {
		return false // no verb of startVerbs
	}
	for _, v := range startVerbs {
		if len(m) <= len(v) || !eqFoldASCII(m[:len(v)], v) {
			continue
		}
		rest := m[len(v):]
		if len(rest) >= 5 && eqFoldASCII(rest[:5], "epoch") && (len(rest) == 5 || !asciiLetter(rest[5])) {
			*r = newPhaseHit(PhaseTrain)
			if e, ok := wordInt(rest[:min(len(rest), 24)], m2s(rest[:5])); ok {
				r.epoch = e
			}
			return true
		}
		for _, pw := range phaseWords {
			if len(rest) >= len(pw.w) && eqFoldASCII(rest[:len(pw.w)], pw.w) && (len(rest) == len(pw.w) || !asciiLetter(rest[len(pw.w)])) {
				*r = newPhaseHit(pw.p)
				return true
			}
		}
		return false
	}
	return false
}

// glogMessage is the message of a glog or absl record ("I0305
// 11:02:10.118201 140 train.py:145] train epoch: 4, loss: 0.31"), or t.
func glogMessage(t []byte) []byte {
	if len(t) < 24 || !(t[0] == 'I' || t[0] == 'W' || t[0] == 'E' || t[0] == 'F') || !asciiDigit(t[1]) || !asciiDigit(t[4]) || t[5] != ' ' {
		return t
	}
	i := bIndex(t[:min(len(t), 120)], "] ")
	if i < 0 {
		return t
	}
	return t[i+2:]
}

// tqdmDescPhase reads a progress bar's description: the text before its
// "NN%|" names the phase when it holds a validation word of its own
// ("valid epoch 3:  12%|", "Eval (EMA):  40%|"). Training words are left to
// the detectors that read the bar's counters.
func tqdmDescPhase(tl []byte, r *phaseHit) bool {
	i := bIndex(tl[:min(len(tl), 160)], "%|")
	if i < 0 {
		if i = barlessPercent(tl[:min(len(tl), 160)]); i < 0 {
			return false
		}
	}
	j := i
	for j > 0 && (asciiDigit(tl[j-1]) || tl[j-1] == ' ' || tl[j-1] == '.') {
		j--
	}
	if j == 0 || tl[j-1] != ':' {
		return false
	}
	desc := tl[:j-1]
	if indexFoldASCII(desc, "val") < 0 && indexFoldASCII(desc, "test") < 0 && indexFoldASCII(desc, "predict") < 0 {
		return false // every validation word holds one of these
	}
	val := false
	for k := 0; k < len(desc); {
		for k < len(desc) && !asciiLetter(desc[k]) {
			k++
		}
		e := k
		for e < len(desc) && (asciiLetter(desc[e]) || desc[e] == '_') {
			e++
		}
		for _, pw := range phaseWords {
			if pw.p == PhaseVal && e-k == len(pw.w) && eqFoldASCII(desc[k:e], pw.w) {
				val = true
			}
		}
		k = e
	}
	if !val {
		return false
	}
	*r = newPhaseHit(PhaseVal)
	r.cur, r.tot, _ = barCounter(tl, i)
	r.done = r.tot > 0 && r.cur == r.tot
	return true
}

// phaseWordLine reads a line that starts with a phase's word (also as a
// table row's first cell: "| eval  | 2 | 20/80 |").
func phaseWordLine(m []byte, r *phaseHit) bool {
	if len(m) > 0 && (m[0] == '[' || m[0] == '|') {
		m = trimSpaceLeft(m[1:])
	}
	if len(m) == 0 || !phaseWordStart[m[0]] {
		return false
	}
	var p Phase
	n := 0
	for _, pw := range phaseWords {
		if len(m) >= len(pw.w) && eqFoldASCII(m[:len(pw.w)], pw.w) {
			p, n = pw.p, len(pw.w)
			break
		}
	}
	if p == PhaseNone {
		return false
	}
	rest := m[n:]
	if len(rest) > 0 {
		switch rest[0] {
		case ' ', '\t', ':', ']', '[', '|', '(', ',', '.':
		default:
			return false // val_loss, training_args, evaluator
		}
	}
	if onlyPunct(rest) || ingWord(m[:n]) && startsPreposition(rest) {
		// The word alone: "Training...", "Validation:", "[eval]"; a phase
		// starting: "Evaluating on test set", "Training for 10 epochs".
		*r = newPhaseHit(p)
		return true
	}
	if hasAnyWord(rest, endWords[:]) {
		if p != PhaseVal {
			return false
		}
		*r = newPhaseHit(PhaseVal)
		r.done, r.ends = true, true
		return true
	}
	cur, tot, counter := barCounter(rest, 0)
	metric := bHas(rest, "loss") || keyValue(rest)
	if !counter && !metric {
		return false // prose: "Validation set: 5000 images"
	}
	*r = newPhaseHit(p)
	if counter {
		r.cur, r.tot = cur, tot
		r.done = p == PhaseVal && cur == tot
	}
	return true
}

// epochBatchLine reads "Epoch 7, batch 350/1200, loss 1.0732".
func epochBatchLine(m []byte, r *phaseHit) bool {
	i := indexFoldASCII(m, "epoch")
	if i < 0 {
		return false
	}
	e, ok := wordInt(m[i:], m2s(m[i:i+len("epoch")]))
	if !ok {
		return false
	}
	j := indexFoldASCII(m[i:], "batch")
	if j < 0 || !bHas(m, "loss") && !bHas(m, "Loss") {
		return false
	}
	cur, tot, ok := barCounter(m, i+j)
	if !ok {
		return false
	}
	*r = newPhaseHit(PhaseTrain)
	r.epoch, r.cur, r.tot = e, cur, tot
	r.inEpoch(cur, tot)
	return true
}

func m2s(b []byte) string { return unsafeStr(b) }

// ingWord says whether w ends in "ing" (training, evaluating, ...).
func ingWord(w []byte) bool {
	return len(w) > 3 && eqFoldASCII(w[len(w)-3:], "ing")
}

// startsPreposition says whether b starts with a preposition that says
// what a phase runs on or for: " on ", " for ", " with ".
func startsPreposition(b []byte) bool {
	for _, p := range [...]string{" on ", " for ", " with "} {
		if len(b) >= len(p) && eqFoldASCII(b[:len(p)], p) {
			return true
		}
	}
	return false
}

// onlyPunct says whether b holds no letter or digit.
func onlyPunct(b []byte) bool {
	for _, c := range b {
		if asciiLetter(c) || asciiDigit(c) || c >= 0x80 {
			return false
		}
	}
	return true
}

// hasAnyWord says whether one of words occurs in b as a word of its own
// (case folded).
func hasAnyWord(b []byte, words []string) bool {
	for i := 0; i < len(b); {
		for i < len(b) && !asciiLetter(b[i]) {
			i++
		}
		j := i
		for j < len(b) && asciiLetter(b[j]) {
			j++
		}
		if j > i {
			for _, w := range words {
				if j-i == len(w) && eqFoldASCII(b[i:j], w) {
					return true
				}
			}
		}
		i = j
	}
	return false
}

// barlessPercent finds the percentage of a tqdm bar drawn without its bar:
// tqdm.notebook's (Jupyter, Colab) text, pasted, and a terminal too narrow
// for the bar print l_bar and r_bar alone, "desc:   3% 1/32 [00:01<00:46,
// 1.50s/it]". The shape: a percentage, a space, n/total, " [". -1 when
// there is none.
func barlessPercent(tl []byte) int {
	for off := 0; off < len(tl); {
		k := bIndex(tl[off:], "% ")
		if k < 0 {
			return -1
		}
		k += off
		off = k + 2
		if k == 0 || !asciiDigit(tl[k-1]) {
			continue
		}
		r := trimSpaceLeft(tl[k+2:])
		_, n, ok := scanInt(r)
		if !ok || n == 0 || n >= len(r) || r[n] != '/' {
			continue
		}
		_, m, ok := scanInt(r[n+1:])
		if !ok || m == 0 || !bHasPrefix(r[n+1+m:], " [") {
			continue
		}
		return k
	}
	return -1
}

// afterBar says whether the text at t[at:] was glued to a progress bar's
// frame: tqdm ends a frame with its r_bar ("[24:16<16:33, 11.93it/s]") and
// no newline, so the next print starts right after the ']'. What follows is
// a record of its own ("...it/s]{'loss': 0.7283, ...}").
func afterBar(t []byte, at int) bool {
	return at > 0 && at <= len(t) && t[at-1] == ']' && bIndex(t[:at], "%|") >= 0
}

// keyValue says whether b holds a key=value pair: an '=' between a key's
// last character (a letter, a digit, '_') and a value's first (not a space,
// not another '='). A rule of '=' ("===== test session starts =====") is
// decoration, not a metric.
func keyValue(b []byte) bool {
	for i := 1; i+1 < len(b); i++ {
		if b[i] != '=' {
			continue
		}
		k, v := b[i-1], b[i+1]
		if (asciiLetter(k) || asciiDigit(k) || k == '_') && v != ' ' && v != '=' && v != '\t' {
			return true
		}
	}
	return false
}
