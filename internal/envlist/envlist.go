// Package envlist reads and edits environments held as KEY=VALUE lists, the
// form os/exec takes and os.Environ gives. Where a key appears more than
// once the last entry wins, as in os/exec.
package envlist

import "strings"

// Lookup returns the value of key in env, and whether it is set at all.
func Lookup(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// Get returns the value of key in env, "" when it is unset.
func Get(env []string, key string) string {
	v, _ := Lookup(env, key)
	return v
}

// Set returns a copy of env with key set to value: every entry for key is
// replaced by one, at the first entry's place (so that a diff of two
// environments stays small), or appended when key was unset. env is not
// modified.
func Set(env []string, key, value string) []string {
	out := make([]string, 0, len(env)+1)
	done := false
	for _, e := range env {
		if k, _, ok := strings.Cut(e, "="); ok && k == key {
			if !done {
				out = append(out, key+"="+value)
				done = true
			}
			continue
		}
		out = append(out, e)
	}
	if !done {
		out = append(out, key+"="+value)
	}
	return out
}

// Unset returns a copy of env without the given keys.
func Unset(env []string, keys ...string) []string {
	out := make([]string, 0, len(env))
next:
	for _, e := range env {
		k, _, _ := strings.Cut(e, "=")
		for _, key := range keys {
			if k == key {
				continue next
			}
		}
		out = append(out, e)
	}
	return out
}
