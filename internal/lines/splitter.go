// Package lines turns a terminal byte stream into logical lines for scanning.
//
// A training job's output is not a clean sequence of lines: tqdm redraws its
// bar with a bare '\r', a pseudo-terminal turns every '\n' into "\r\n", colour
// codes sit inside words, and a progress bar can run for megabytes without a
// newline. The Splitter cuts on '\n' and on a lone '\r', treats "\r\n" as one
// break, strips ANSI escape sequences, bounds the length of a line, and keeps
// the 1-based '\n' line number of every piece so that a verdict can point at a
// line in the log file.
//
// The Splitter is for scanning only: the bytes shown to the user and written to
// the log are never altered.
package lines

import (
	"encoding/binary"
	"math/bits"
)

// DefaultMax is the longest line handed to a consumer; the rest of a longer
// line is dropped (and the line is marked Truncated). OOM messages, even with
// every optional clause, are well under 2 KiB.
const DefaultMax = 64 << 10

// Line is one logical line. Text is only valid during the callback, and
// only to be read: it is the Splitter's buffer, which it reuses, or part of
// the bytes passed to Write (a line that lies whole in them).
type Line struct {
	Text      []byte // without its terminator, ANSI sequences removed
	Num       int    // 1-based line number, counting '\n' in the stream
	CR        bool   // ended by a lone '\r' (a redraw frame), not by '\n'
	Truncated bool   // the line was longer than the limit
	Partial   bool   // delivered by Flush, without a terminator
}

// Splitter is an io.Writer that calls Emit for each logical line. It is not
// safe for concurrent use.
type Splitter struct {
	emit      func(Line)
	max       int
	buf       []byte
	num       int
	truncated bool
	pendingCR bool // last byte seen was '\r': a following '\n' completes a CRLF
	esc       escState
}

type escState uint8

const (
	escNone escState = iota
	escStart
	escCSI
	escOSC
	escOSCEsc
)

// New returns a Splitter that emits lines of at most max bytes (DefaultMax if
// max <= 0).
func New(max int, emit func(Line)) *Splitter {
	if max <= 0 {
		max = DefaultMax
	}
	return &Splitter{emit: emit, max: max, num: 1, buf: make([]byte, 0, 256)}
}

// Write splits p. It never fails and never retains p.
func (s *Splitter) Write(p []byte) (int, error) {
	for i := 0; i < len(p); i++ {
		if s.esc == escNone && !s.pendingCR {
			j := i + ordinaryRun(p[i:])
			if len(s.buf) == 0 && !s.truncated && j-i <= s.max && j < len(p) {
				// A whole line in p, cut at neither end: hand it on from p,
				// without copying it.
				if c := p[j]; c == '\n' {
					s.emit(Line{Text: p[i:j], Num: s.num})
					s.num++
					i = j
					continue
				} else if c == '\r' && j+1 < len(p) {
					if p[j+1] == '\n' {
						s.emit(Line{Text: p[i:j], Num: s.num})
						s.num++
						i = j + 1
						continue
					}
					if j > i { // an empty frame is not handed on (see line)
						s.emit(Line{Text: p[i:j], Num: s.num, CR: true})
					}
					i = j
					continue
				}
			}
			// Copy a run of ordinary bytes at once.
			if j > i {
				s.appendText(p[i:j])
				i = j
				if i == len(p) {
					break
				}
			}
		}
		c := p[i]
		if s.pendingCR {
			s.pendingCR = false
			if c == '\n' {
				// "\r\n" is one line break (a pty's ONLCR output).
				s.line(false)
				s.num++
				continue
			}
			s.line(true)
		}
		if s.esc != escNone {
			if c == '\n' || c == '\r' {
				// A line break always ends an escape sequence: a cut-off
				// sequence must not swallow the line count.
				s.esc = escNone
			} else {
				s.escape(c)
				continue
			}
		}
		switch c {
		case '\n':
			s.line(false)
			s.num++
		case '\r':
			s.pendingCR = true
		case 0x1b:
			s.esc = escStart
		default:
			s.appendText(p[i : i+1])
		}
	}
	return len(p), nil
}

// Flush delivers a pending partial line (one without a terminator), as at the
// end of the stream. A pending '\r' ends its line as a frame.
func (s *Splitter) Flush() {
	if s.pendingCR {
		s.pendingCR = false
		s.line(true)
	}
	if len(s.buf) > 0 || s.truncated {
		s.emit(Line{Text: s.buf, Num: s.num, Truncated: s.truncated, Partial: true})
		s.buf = s.buf[:0]
		s.truncated = false
	}
}

// special marks the bytes that end a run of ordinary text.
var special = [256]bool{'\n': true, '\r': true, 0x1b: true}

// ordinaryRun is the length of the run of ordinary bytes that starts b: the
// index of its first special byte, or len(b). It reads b eight bytes at a
// time: the special bytes are control characters (below 0x20), and a word
// without any (most words of a log: a tab is the only other control
// character text has) is passed with one test; in a word with one, the
// first special byte is found by its mask, without a loop.
func ordinaryRun(b []byte) int {
	i := 0
	for ; i+16 <= len(b); i += 16 {
		// Two words per test: a line's bytes are passed at half the cost.
		w, v := binary.LittleEndian.Uint64(b[i:i+8]), binary.LittleEndian.Uint64(b[i+8:i+16])
		if ((w-0x2020202020202020)&^w|(v-0x2020202020202020)&^v)&0x8080808080808080 != 0 {
			break
		}
	}
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i : i+8])
		// Sets a byte's high bit only if some byte is below 0x20 (exact
		// for whether there is one: see "Determine if a word has a byte
		// less than n", Bit Twiddling Hacks).
		if (w-0x2020202020202020)&^w&0x8080808080808080 == 0 {
			continue
		}
		if m := zeroBytes(w^0x0a0a0a0a0a0a0a0a) | zeroBytes(w^0x0d0d0d0d0d0d0d0d) | zeroBytes(w^0x1b1b1b1b1b1b1b1b); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if special[b[i]] {
			return i
		}
	}
	return len(b)
}

// zeroBytes sets the high bit of the lowest zero byte of x, and maybe of
// bytes above it (a borrow), never of one below it: the lowest set bit is
// exact, the only one ordinaryRun reads ("Determine if a word has a zero
// byte", Bit Twiddling Hacks).
func zeroBytes(x uint64) uint64 {
	return (x - 0x0101010101010101) &^ x & 0x8080808080808080
}

func (s *Splitter) appendText(b []byte) {
	room := s.max - len(s.buf)
	if len(b) > room {
		b = b[:room]
		s.truncated = true
	}
	s.buf = append(s.buf, b...)
}

// escape advances the escape-sequence state machine by one byte.
func (s *Splitter) escape(c byte) {
	switch s.esc {
	case escStart:
		switch c {
		case '[':
			s.esc = escCSI
		case ']':
			s.esc = escOSC
		default:
			s.esc = escNone // two-byte sequence such as ESC 7, ESC M
		}
	case escCSI:
		if c >= 0x40 && c <= 0x7e {
			s.esc = escNone
		}
	case escOSC:
		switch c {
		case 0x07:
			s.esc = escNone
		case 0x1b:
			s.esc = escOSCEsc
		}
	case escOSCEsc:
		s.esc = escNone
	}
}

// LineNum is the number of the line now being read (1-based).
func (s *Splitter) LineNum() int { return s.num }

// Truncated reports whether the line being read has reached the length
// bound already: the rest of it, up to its end, is dropped.
func (s *Splitter) Truncated() bool { return s.truncated }

func (s *Splitter) line(cr bool) {
	// An empty frame between two '\r' carries nothing worth scanning.
	if cr && len(s.buf) == 0 && !s.truncated {
		return
	}
	s.emit(Line{Text: s.buf, Num: s.num, CR: cr, Truncated: s.truncated})
	s.buf = s.buf[:0]
	s.truncated = false
}
