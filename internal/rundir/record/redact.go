package record

import "github.com/gpuguard/gpuguard/internal/redact"

// Events that carry the command, or text that may quote it, say how they
// are written: with their secrets masked (internal/redact,
// docs/secrets.md). Marshal writes every event through redacted, so that
// events.jsonl and the notifications that carry an event never hold a
// secret given on the command line; the job's own argv is not changed.
type redactor interface {
	redacted() Event
}

// redacted is ev as it is written.
func redacted(ev Event) Event {
	if r, ok := ev.(redactor); ok {
		return r.redacted()
	}
	return ev
}

func (e RunStart) redacted() Event {
	e.Argv = redact.Argv(e.Argv)
	e.EnvChanges = redact.Argv(e.EnvChanges)
	e.EnvWarnings = texts(e.EnvWarnings)
	return e
}

func (e AttemptStart) redacted() Event {
	e.Argv = redact.Argv(e.Argv)
	e.EnvChanges = redact.Argv(e.EnvChanges)
	return e
}

func (e AttemptStartFailed) redacted() Event {
	e.Error = redact.Text(e.Error)
	return e
}

func (e Error) redacted() Event {
	e.Error = redact.Text(e.Error)
	return e
}

func (e Failure) redacted() Event {
	e.Text = redact.Text(e.Text)
	return e
}

func (e Decision) redacted() Event {
	e.Reason = redact.Text(e.Reason)
	return e
}

func (e Requeue) redacted() Event {
	e.Command, e.Output = redact.Text(e.Command), redact.Text(e.Output)
	return e
}

func texts(ss []string) []string {
	if ss == nil {
		return nil
	}
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = redact.Text(s)
	}
	return out
}
