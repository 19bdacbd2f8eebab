package classify

// The site of an out-of-memory error: the innermost frame of the Python
// traceback printed before it (`File "/x/torch/nn/modules/conv.py", line
// 456, in _conv_forward`). Two failures asking for the same bytes at the
// same site are the same allocation; the policy's cause check uses it
// (Verdict.Site).

// maxSite bounds a site's text.
const maxSite = 240

// siteWindow is how many lines after its last frame an error still belongs
// to that traceback (the exception's own lines follow the frames at once;
// a wrapped message takes a few more).
const siteWindow = 8

// frameSeen is the last traceback frame line read, kept without allocating
// (frame lines are common in tracebacks that are not failures).
type frameSeen struct {
	buf  [maxSite]byte
	n    int
	line int // 0: none
	rank int
}

// note keeps t when it is a frame line: `File "PATH", line N, in FUNC`.
func (s *frameSeen) note(t []byte, num, rank int) {
	t = trimSpace(t)
	if !bHasPrefix(t, `File "`) {
		return
	}
	q := bIndex(t[len(`File "`):], `", line `)
	if q < 0 {
		return
	}
	s.n = copy(s.buf[:], t[len(`File "`):])
	s.line, s.rank = num, rank
}

// before is the site of a failure read on line num of rank: the last frame,
// when it came just before and from the same rank; "" otherwise.
func (s *frameSeen) before(num, rank int) string {
	if s.line == 0 || num-s.line > siteWindow || s.line > num || (rank >= 0 && s.rank >= 0 && rank != s.rank) {
		return ""
	}
	// `PATH", line N, in FUNC` → `PATH:N in FUNC`.
	b := s.buf[:s.n]
	q := bIndex(b, `", line `)
	if q < 0 {
		return ""
	}
	path, rest := b[:q], b[q+len(`", line `):]
	out := make([]byte, 0, len(b))
	out = append(out, path...)
	out = append(out, ':')
	if i := bIndex(rest, ", in "); i >= 0 {
		out = append(out, rest[:i]...)
		out = append(out, " in "...)
		out = append(out, trimSpace(rest[i+len(", in "):])...)
	} else {
		out = append(out, trimSpace(rest)...)
	}
	return string(out)
}
