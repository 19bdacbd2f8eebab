package checkpoint

import (
	"bytes"
	"regexp"
	"strings"
)

// What a job's output says about its checkpoints. Two readers of a line,
// kept beside the watcher that sees the files: the stall watchdog asks
// whether a save is under way (a save prints no steps, so its longer bound
// applies), and the checkpoint-glob check asks where a checkpoint was saved
// (to say when no glob of the policy matches it). Output (output.go) reads
// the lines in order for the resume choice's evidence.

// savingRE: a line saying that a checkpoint is being saved.
var savingRE = regexp.MustCompile(`(?i)\b(sav(e|es|ing)|writ(e|es|ing)|serializ(e|es|ing))\b.*\b(checkpoint|ckpt|model|state[_ ]dict|weights)\b|\b(checkpoint|ckpt)\b.*\bsav(e|es|ing)\b`)

// SavingLine reports whether a line of output says the job is saving (or
// has just saved) a checkpoint, its model or its weights.
func SavingLine(text []byte) bool { return savingRE.Match(text) }

// savedRE matches the lines in which jobs say where they saved a checkpoint:
// "saved checkpoint PATH", "Saved checkpoint to PATH", Hugging Face's
// "Saving model checkpoint to PATH", Lightning's "Epoch N, global step M:
// ... saving model to 'PATH'". The path is group 1 (quoted) or 2.
var savedRE = regexp.MustCompile(`(?i:saved checkpoint(?: to)?|saving model checkpoint to|saving model to)\s+(?:['"]([^'"]+)['"]|(\S+))`)

// savedWords prefilter the lines: every form holds one of them.
var savedWords = [][]byte{[]byte("aved checkpoint"), []byte("aving model"), []byte("AVED CHECKPOINT")}

// SavedPath is the path a line of output says a checkpoint was saved at.
func SavedPath(text []byte) (string, bool) {
	if len(text) > 4096 {
		return "", false
	}
	hit := false
	for _, w := range savedWords {
		if bytes.Contains(text, w) {
			hit = true
			break
		}
	}
	if !hit {
		return "", false
	}
	m := savedRE.FindSubmatch(text)
	if m == nil {
		return "", false
	}
	p := string(m[1])
	if p == "" {
		p = strings.TrimRight(string(m[2]), ".,;:)")
	}
	return p, p != ""
}
