package classify

// The message reader: what it takes to read a failure message as its
// program printed it when a logger, a terminal or a paste has changed its
// line structure. Hard wraps at a fixed column, even mid-word, are joined
// by the pending-message state (Classifier.continuePending), which also
// removes a logger's prefix repeated on each continuation record
// (repeatedPrefix: the first line's prefix, in shape) and keeps ranks
// apart (another rank's line, interleaved, neither continues nor ends the
// message). This file reads the other shapes:
//
//   - a message quoted inside a structured record (a JSON log line, a
//     Python dict's repr) with its newlines escaped as the two characters
//     `\n`: the record is split at each escape and each part read as a line
//     of its own, unescaped (`\"`, `\\`, `\'`, `\t`, `\u001b[...m`);
//   - a message glued to the text printed before it with no separator
//     ("... aborting runRuntimeError: CUDA out of memory."): an exception's
//     name is Python's dotted identifier whose last part starts with an
//     upper-case letter (the class) and whose other parts are lower-case
//     module names, so the text glued before it is cut off (exceptionName).

import (
	"bytes"
	"strings"
)

// maxHead bounds the first line's prefix kept to recognise a repeated one.
const maxHead = 160

// repeatedPrefix is the length of the prefix of t that repeats, in shape,
// the start of head (the text before the message on its first line): a
// logger that writes each line of a message as a record of its own
// ("2026-01-20 14:02:23,015 - ERROR - trainer - " on every line, glog's
// "E0212 03:12:01.551240  9914 file.cc:88] ") repeats its prefix, with
// other digits where the clock moved. Shape: a digit matches any digit,
// any other byte itself. The prefix must end at a separator (a space, or
// ']', ':', '|', '-' before one) and be at least 6 bytes; 0 when none.
func repeatedPrefix(head, t []byte) int {
	k := 0
	for k < len(head) && k < len(t) {
		a, b := head[k], t[k]
		if a != b && !(asciiDigit(a) && asciiDigit(b)) {
			break
		}
		k++
	}
	// Back to the end of the last separator within the common part.
	for k > 0 && !(t[k-1] == ' ' || t[k-1] == '\t') {
		k--
	}
	if k < 6 {
		return 0
	}
	// The prefix must hold a record's punctuation or a digit: not two
	// words of prose that happen to begin both lines.
	if bytes.IndexAny(t[:k], "0123456789]|:-") < 0 {
		return 0
	}
	return k
}

// jsonMessageKeys are the keys under which structured loggers put a
// record's text: Python's json loggers and zap ("message", "msg"), Docker's
// json-file and fluentd ("log"), Google Cloud Logging ("textPayload").
var jsonMessageKeys = [...]string{`"message":`, `"msg":`, `"log":`, `"textPayload":`, `"message" :`, `"msg" :`}

// jsonMessage returns the quoted value of a JSON log record's message field
// (still escaped), or nil when t is not such a record.
func jsonMessage(t []byte) []byte {
	for _, k := range jsonMessageKeys {
		i := bIndex(t, k)
		if i < 0 {
			continue
		}
		v := trimSpaceLeft(t[i+len(k):])
		if len(v) == 0 || v[0] != '"' {
			continue
		}
		v = v[1:]
		for j := 0; j < len(v); j++ {
			switch v[j] {
			case '\\':
				j++
			case '"':
				return v[:j]
			}
		}
		return v // cut short: read what there is
	}
	return nil
}

// jsonMultiline returns the first string value of the JSON record t, other
// than its message m, that holds an escaped newline: the multi-line text a
// structured logger keeps beside the message (python-json-logger's and
// structlog's "exc_info"/"exception", "stack_trace", "error.stack"),
// whatever its key. nil when there is none.
func jsonMultiline(t, m []byte) []byte {
	if bIndex(t, `\n`) < 0 {
		return nil
	}
	for i := 0; i < len(t); i++ {
		if t[i] != '"' {
			continue
		}
		// A quoted string from i+1 to j.
		j := i + 1
		for j < len(t) && t[j] != '"' {
			if t[j] == '\\' {
				j++
			}
			j++
		}
		if j >= len(t) {
			return nil
		}
		v := t[i+1 : j]
		k := j + 1
		for k < len(t) && t[k] == ' ' {
			k++
		}
		isKey := k < len(t) && t[k] == ':'
		if !isKey && len(v) > 0 && &v[0] != &m[0] && bIndex(v, `\n`) >= 0 {
			return v
		}
		i = j
	}
	return nil
}

// escapedFrames reads a structured record (a JSON log line: its message
// field), or a line on which newlines were written as the escape `\n`
// inside quoted text: each part is classified as a line (of the same
// number and rank). It returns false, reading nothing, when t is neither.
func (c *Classifier) escapedFrames(t []byte, rank int) bool {
	if len(t) > 1 && t[0] == '{' && t[1] == '"' {
		m := jsonMessage(t)
		if m == nil {
			return false // a record without a message field: read as it is
		}
		if ml := jsonMultiline(t, m); ml != nil {
			// The message, and the traceback a logger put in a field of
			// its own: read in order, the message first.
			c.jbuf = append(append(append(c.jbuf[:0], m...), `\n`...), ml...)
			m = c.jbuf
		}
		t = m
	} else if first := bIndex(t, `\n`); first < 0 || bytes.IndexAny(t[:first], `"'`) < 0 {
		return false
	}
	c.ebuf = c.ebuf[:0]
	for i := 0; i < len(t); i++ {
		b := t[i]
		if b != '\\' || i+1 == len(t) {
			c.ebuf = append(c.ebuf, b)
			continue
		}
		switch n := t[i+1]; n {
		case 'n', 'r':
			c.ebuf = append(c.ebuf, '\n')
			i++
		case '"', '\'', '\\', '/':
			c.ebuf = append(c.ebuf, n)
			i++
		case 't':
			c.ebuf = append(c.ebuf, '\t')
			i++
		case 'u':
			// \u001b[...m, an escape sequence: dropped with its parameters.
			if i+6 <= len(t) && string(t[i+2:i+6]) == "001b" {
				j := i + 6
				if j < len(t) && t[j] == '[' {
					j = csiEnd(t, j)
				}
				i = j - 1
				continue
			}
			c.ebuf = append(c.ebuf, b)
		default:
			c.ebuf = append(c.ebuf, b)
		}
	}
	c.frames(c.ebuf, '\n', rank, nil)
	return true
}

// exceptionName is the exception's name in the dotted identifier s (which
// ended just before ": "), without text glued before it: the last part is
// the class (it starts with an upper-case letter, or is glued to a lower-case
// word before its first upper-case letter: "runRuntimeError"), the parts
// before it are module names (lower case: "torch.cuda."); a part that is
// neither ends the name. "" when s names no class.
func exceptionName(s string) string {
	dot := -1
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '.' {
			dot = i
			break
		}
	}
	last := s[dot+1:]
	if last == "" {
		return ""
	}
	u := 0
	for u < len(last)-1 && last[u] == '_' {
		u++ // a private class: numpy's _ArrayMemoryError
	}
	if !(last[u] >= 'A' && last[u] <= 'Z') {
		// Glued: the class starts at the first upper-case letter.
		k := 0
		for k < len(last) && !(last[k] >= 'A' && last[k] <= 'Z') {
			k++
		}
		if k == len(last) {
			return s // no class-like part: keep what was printed
		}
		return last[k:]
	}
	start := dot + 1
	for start > 0 {
		// The part before s[start-1] == '.'.
		j := start - 1
		i := j
		for i > 0 && s[i-1] != '.' {
			i--
		}
		part := s[i:j]
		if !modulePart(part) {
			break
		}
		start = i
	}
	// The first module part may be glued to a word before it
	// ("runtorch.OutOfMemoryError"): when it ends with the name of a
	// package that raises memory errors, the name starts there.
	first := s[start:]
	if k := strings.IndexByte(first, '.'); k > 0 {
		part := first[:k]
		for _, root := range exceptionRoots {
			if part == root {
				return first
			}
			if len(part) > len(root) && part[len(part)-len(root):] == root {
				return first[len(part)-len(root):]
			}
		}
		if pyBuiltinException(last) {
			// Built-in exceptions print unqualified, and a package's own
			// of the same name (numpy's MemoryError) under a known
			// package: "done.RuntimeError" is glued.
			return last
		}
	}
	return first
}

// exceptionRoots are the top-level packages whose exceptions a memory
// failure prints qualified.
var exceptionRoots = [...]string{"torch", "jaxlib", "jax", "tensorflow", "numpy", "ray", "deepspeed", "vllm", "triton", "keras", "paddle"}

// pyBuiltinException says whether name is one of Python's built-in
// exceptions that a failure prints (without a module).
func pyBuiltinException(name string) bool {
	switch name {
	case "RuntimeError", "MemoryError", "ValueError", "OSError", "Exception", "AssertionError", "KeyError",
		"IndexError", "TypeError", "SystemError", "FloatingPointError", "ImportError", "ModuleNotFoundError",
		"FileNotFoundError", "NotImplementedError", "AttributeError", "ZeroDivisionError", "OverflowError":
		return true
	}
	return false
}

// modulePart says whether p can be a module's name in a dotted path: a
// lower-case identifier.
func modulePart(p string) bool {
	if p == "" || asciiDigit(p[0]) {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || asciiDigit(c) || c == '_') {
			return false
		}
	}
	return true
}
