package classify

import (
	"math"
	"strings"
	"unsafe"
)

// Sizes as out-of-memory messages print them: "2.47 GiB", "0 bytes",
// "612.40 MiB", "812.3KiB", "5.37GiB (5767168000B)", "47185920 bytes", "3GB",
// "9.64G".
//
// Every allocator that prints KB, MB, GB or a bare K/M/G computes it with
// powers of 1024 (PyTorch's MPS allocator divides by 1048576 and prints "MB",
// the old TH allocator divides by 1073741824 and prints "GB", XLA prints "G"),
// so those units are read as KiB, MiB and GiB. A value printed with two
// decimals is rounded to the nearest byte; where the message also prints the
// exact count in parentheses ("5.37GiB (5767168000B)") the exact count wins.

// memUnitMult returns the multiplier of the unit at the start of b and the
// unit's length, or 0 when b does not start with a size unit. A unit must not
// run on into a letter ("Bytes" is a unit, "Box" is not).
func memUnitMult(b []byte) (mult int64, n int) {
	type unit struct {
		s string
		m int64
	}
	// Longest first, so that "bytes" wins over "b" and "KiB" over "K".
	units := [...]unit{
		{"bytes", 1}, {"byte", 1},
		{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40}, {"pib", 1 << 50},
		{"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30}, {"tb", 1 << 40}, {"pb", 1 << 50},
		{"b", 1}, {"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	}
	for _, u := range units {
		if len(b) < len(u.s) || !eqFoldASCII(b[:len(u.s)], u.s) {
			continue
		}
		if len(b) > len(u.s) && asciiLetter(b[len(u.s)]) {
			continue
		}
		return u.m, len(u.s)
	}
	return 0, 0
}

func asciiLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }
func asciiDigit(c byte) bool  { return c >= '0' && c <= '9' }

// parseMemSize reads a size at the start of b: a decimal number, at most one
// space, and a unit. It returns the size in bytes and the length consumed, or
// ok == false. When the size is followed by " (NNNB)" or " (NNN bytes)", the
// exact count is returned and consumed too.
func parseMemSize(b []byte) (bytes int64, n int, ok bool) {
	i := 0
	var ip float64
	digits := 0
	for i < len(b) && asciiDigit(b[i]) {
		ip = ip*10 + float64(b[i]-'0')
		i++
		digits++
	}
	if digits == 0 {
		return 0, 0, false
	}
	frac, scale := 0.0, 1.0
	if i+1 < len(b) && b[i] == '.' && asciiDigit(b[i+1]) {
		i++
		for i < len(b) && asciiDigit(b[i]) {
			frac = frac*10 + float64(b[i]-'0')
			scale *= 10
			i++
		}
	} else if i+1 < len(b) && b[i] == '.' && b[i+1] == ' ' {
		// NumPy keeps the point of a value with no decimals left:
		// "Unable to allocate 100. GiB", "1000. MiB". A unit must follow.
		if m, _ := memUnitMult(b[i+2:]); m != 0 {
			i++
		}
	}
	j := i
	if j < len(b) && b[j] == ' ' {
		j++
	} else if j+1 < len(b) && b[j] == 0xc2 && b[j+1] == 0xa0 {
		j += 2 // a no-break space, as a web page's copy gives it
	}
	mult, ul := memUnitMult(b[j:])
	if mult == 0 {
		return 0, 0, false
	}
	j += ul
	v := (ip + frac/scale) * float64(mult)
	if v > math.MaxInt64/2 {
		return 0, 0, false
	}
	bytes = int64(math.Round(v))
	// An exact count in parentheses: "5.37GiB (5767168000B)".
	if j+2 < len(b) && b[j] == ' ' && b[j+1] == '(' && asciiDigit(b[j+2]) {
		k := j + 2
		exact, dn, ok := scanInt(b[k:])
		if ok {
			k += dn
			if k < len(b) && b[k] == ' ' {
				k++
			}
			if m2, ul2 := memUnitMult(b[k:]); m2 == 1 && k+ul2 < len(b) && b[k+ul2] == ')' {
				return exact, k + ul2 + 1, true
			}
		}
	}
	return bytes, j, true
}

// memSizeAfter parses the size that follows the first occurrence of key in b
// (spaces between them are skipped). ok is false when key is absent or no
// size follows it.
func memSizeAfter(b []byte, key string) (v int64, ok bool) {
	i := bIndex(b, key)
	if i < 0 {
		return 0, false
	}
	rest := b[i+len(key):]
	for len(rest) > 0 && rest[0] == ' ' {
		rest = rest[1:]
	}
	v, _, ok = parseMemSize(rest)
	return v, ok
}

// memSizeBefore parses the size that ends just before index end of b ("... 2.40
// GiB allowed;" with end at " allowed;"). It returns the size and the index
// where it starts.
func memSizeBefore(b []byte, end int) (v int64, start int, ok bool) {
	i := end
	for i > 0 && b[i-1] == ' ' {
		i--
	}
	// unit letters
	u := i
	for u > 0 && asciiLetter(b[u-1]) {
		u--
	}
	if u == i {
		return 0, 0, false
	}
	if u > 0 && b[u-1] == ' ' {
		u--
	}
	d := u
	for d > 0 && (asciiDigit(b[d-1]) || b[d-1] == '.') {
		d--
	}
	if d == u {
		return 0, 0, false
	}
	v, n, ok := parseMemSize(b[d:i])
	if !ok || d+n != i {
		return 0, 0, false
	}
	return v, d, true
}

// scanInt reads a decimal integer (with an optional sign) at the start of b.
func scanInt(b []byte) (v int64, n int, ok bool) {
	neg := false
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		neg = b[0] == '-'
		n = 1
	}
	start := n
	for n < len(b) && asciiDigit(b[n]) {
		if v > (math.MaxInt64-9)/10 {
			return 0, 0, false
		}
		v = v*10 + int64(b[n]-'0')
		n++
	}
	if n == start {
		return 0, 0, false
	}
	if neg {
		v = -v
	}
	return v, n, true
}

// intAfterKey parses the integer after the first occurrence of key, skipping
// spaces.
func intAfterKey(b []byte, key string) (int64, bool) {
	i := bIndex(b, key)
	if i < 0 {
		return 0, false
	}
	rest := b[i+len(key):]
	for len(rest) > 0 && rest[0] == ' ' {
		rest = rest[1:]
	}
	v, _, ok := scanInt(rest)
	return v, ok
}

func valPtr[T any](v T) *T { return &v }

// unsafeStr views b as a string without copying. The string must not outlive the
// call that received b (lines.Line.Text is reused by the splitter).
func unsafeStr(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// bIndex is bytes.Index for a string needle, without a conversion.
func bIndex(b []byte, s string) int { return strings.Index(unsafeStr(b), s) }

// bIndexFrom is the index in b of the first s at or after index from, or -1.
func bIndexFrom(b []byte, from int, s string) int {
	if i := bIndex(b[from:], s); i >= 0 {
		return from + i
	}
	return -1
}

// bHas reports whether b contains s.
func bHas(b []byte, s string) bool { return strings.Contains(unsafeStr(b), s) }

// bHasPrefix reports whether b starts with s.
func bHasPrefix(b []byte, s string) bool { return strings.HasPrefix(unsafeStr(b), s) }
