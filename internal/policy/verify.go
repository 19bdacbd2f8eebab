package policy

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// What a run does when a relaunch's change did not take hold (policy key
// verify: {unapplied: ...}): the job said it uses another value than the
// one gpuguard set, most often because it restored the old one from its
// checkpoint.
const (
	// UnappliedGiveUp: give up, and say why (the default). An attempt
	// that did not run with the change says nothing of the knob.
	UnappliedGiveUp = "give_up"
	// UnappliedDropCheckpoint: relaunch once more with the same values,
	// without the checkpoint that pinned the old one (the job repeats its
	// work since the start).
	UnappliedDropCheckpoint = "drop_checkpoint"
)

// UnappliedModes lists the modes, for messages.
var UnappliedModes = []string{UnappliedGiveUp, UnappliedDropCheckpoint}

// Unapplied is a change of the last relaunch that did not take hold: the
// attempt after it said it uses Used for Knob, where gpuguard set Set, at
// Line of its output (Text). Checkpoint is the checkpoint the attempt
// resumed from ("" for none).
type Unapplied struct {
	Knob       string
	Set, Used  string
	Line       int
	Text       string
	Checkpoint string
}

// String is "batch_size 16 did not take hold: the job used 32 (line 7:
// "Restoring train_batch_size=32 from the checkpoint")".
func (u Unapplied) String() string {
	return fmt.Sprintf("%s %s did not take hold: the job used %s (line %d: %q)", u.Knob, u.Set, u.Used, u.Line, u.Text)
}

// UnappliedMode returns the policy's verify.unapplied, UnappliedGiveUp
// when it has none.
func (p *Policy) UnappliedMode() string {
	if p.unapplied == "" {
		return UnappliedGiveUp
	}
	return p.unapplied
}

// KeySpellings returns the ways the job may write knob's key when it echoes
// its settings: the policy's flags, key=value key, environment variable or
// config key (its last element too). nil for an unknown knob.
func (p *Policy) KeySpellings(name string) []string {
	k := p.knobByName[name]
	if k == nil {
		return nil
	}
	out := k.spellings()
	if k.env != "" {
		out = append(out, k.env)
	}
	return out
}

func (w *walker) verifySpec(n *yaml.Node, p *Policy) {
	for _, f := range w.mapping(n, "verify", "unapplied") {
		s, ok := w.scalar(f.val, "verify.unapplied")
		if !ok {
			continue
		}
		switch s {
		case UnappliedGiveUp:
		case UnappliedDropCheckpoint:
			if p.ckpt.Required {
				w.at(f.val, "verify.unapplied: drop_checkpoint starts the job without a checkpoint, which checkpoints: {required: true} forbids; drop one of the two")
				continue
			}
		default:
			w.at(f.val, "verify.unapplied must be give_up or drop_checkpoint, not %q%s", s, didYouMean(s, UnappliedModes))
			continue
		}
		p.unapplied = s
	}
}

// unappliedDecision is the decision after an attempt in which a change of
// the last relaunch did not take hold (out.Unapplied): the attempt is no
// evidence about the knob, so no rule is asked about it. With
// verify.unapplied: drop_checkpoint, and when the attempt resumed from a
// checkpoint, the job is relaunched with the same values without it
// (FromScratch); otherwise the run gives up and says why.
func (p *Policy) unappliedDecision(st State, out Outcome, kind classify.Kind, what string, d Decision) Decision {
	var said []string
	var ckpt string
	fromCkpt := true
	for _, u := range out.Unapplied {
		said = append(said, u.String())
		if u.Checkpoint == "" {
			fromCkpt = false
		} else if ckpt == "" {
			ckpt = u.Checkpoint
		}
	}
	list := strings.Join(said, "; ")
	knobs := make([]string, len(out.Unapplied))
	for i, u := range out.Unapplied {
		knobs[i] = u.Knob
	}
	notEvidence := fmt.Sprintf("attempt %d says nothing of whether %s is the cause", out.Attempt, strings.Join(knobs, " or "))
	d.State = st
	switch {
	case !fromCkpt:
		d.Verb = GiveUp
		d.Reason = fmt.Sprintf("%s; %s, and the attempt did not resume from a checkpoint, so none pins the old value: the job takes it from elsewhere (check where the policy sets the knob); %s",
			what, list, notEvidence)
	case p.UnappliedMode() != UnappliedDropCheckpoint:
		d.Verb = GiveUp
		d.Reason = fmt.Sprintf("%s; %s: the job kept the value it resumed with from %s, and %s; to start over without the checkpoint in such a case, set verify: {unapplied: drop_checkpoint}",
			what, list, ckpt, notEvidence)
	default:
		d.Verb = Relaunch
		d.FromScratch = true
		d.Note = fmt.Sprintf("%s; starting without the checkpoint that pins it, %s (verify: {unapplied: drop_checkpoint})", list, ckpt)
		d.Backoff = p.backoff.wait(st.Relaunches, out.Rand)
		st.Relaunches++
		st.ByKind[kind]++
		if st.Last != nil {
			d.Rule, d.Step = st.Last.Rule, st.Last.Step
			st.Last.Attempt = out.Attempt
		}
		d.Reason = fmt.Sprintf("%s; %s; relaunch %d of %d", what, d.Note, st.Relaunches, p.budget.relaunches)
		d.State = st
	}
	return d
}

// unappliedKnob reports whether knob's change did not take hold in out:
// the attempt is no evidence against the knob.
func (out Outcome) unappliedKnob(last *Relaunched) bool {
	if last == nil {
		return false
	}
	for _, u := range out.Unapplied {
		for _, c := range last.Changes {
			if c.Knob == u.Knob {
				return true
			}
		}
	}
	return false
}
