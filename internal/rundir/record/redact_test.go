package record

import (
	"bytes"
	"slices"
	"testing"
	"time"
)

// Every event that carries the command, or text that may quote it, is
// written with its secrets masked, and the event given is left as it was.
func TestMarshalRedacts(t *testing.T) {
	argv := []string{"python", "train.py", "--api-key=s3cr3t", "--token", "abc", "https://u:pw@host/x", "HF_TOKEN=zzz"}
	orig := slices.Clone(argv)
	events := []Event{
		RunStart{Argv: argv, EnvChanges: []string{"WANDB_API_KEY=zzz"}, EnvWarnings: []string{"kept HF_TOKEN=zzz"}},
		AttemptStart{Attempt: 1, Argv: argv},
		AttemptStartFailed{Attempt: 1, Error: "cannot run python train.py --token abc"},
		Error{Attempt: 1, Error: "rendering --api-key=s3cr3t failed"},
		Failure{Text: "Traceback: train.py --token abc https://u:pw@host/x"},
		Decision{Verb: "give_up", Reason: "HF_TOKEN=zzz"},
		Requeue{Command: "scontrol --token abc", Output: "refused: --password=s3cr3t"},
	}
	for _, ev := range events {
		line := Marshal(time.Unix(0, 0), ev)
		for _, secret := range []string{"s3cr3t", "abc", "pw@", "zzz"} {
			if bytes.Contains(line, []byte(secret)) {
				t.Errorf("%s: %s holds %q", ev.EventType(), line, secret)
			}
		}
		if !bytes.Contains(line, []byte("***")) {
			t.Errorf("%s: %s masks nothing", ev.EventType(), line)
		}
		entries, bad, err := Read(bytes.NewReader(line))
		if err != nil || len(bad) > 0 || len(entries) != 1 {
			t.Errorf("%s: %s does not read back: %v %v", ev.EventType(), line, bad, err)
		}
	}
	if !slices.Equal(argv, orig) {
		t.Errorf("Marshal changed the event's argv: %q", argv)
	}
}
