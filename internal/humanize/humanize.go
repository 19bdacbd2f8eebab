// Package humanize formats byte counts the way gpuguard prints them, in
// binary units (1 GiB = 2^30 bytes), as PyTorch, nvidia-smi and the kernel do.
// Size is the one way a size is written for people; JSON keeps bytes.
package humanize

import (
	"math"
	"strconv"
)

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
)

// units from GiB up: two decimals, as OOM messages print the figures a size
// is compared with ("15.82 GiB", "2.50 TiB", "8.00 EiB").
var bigUnits = [...]struct {
	name string
	div  float64
}{{"EiB", 1 << 60}, {"PiB", 1 << 50}, {"TiB", 1 << 40}, {"GiB", gib}}

// Size writes b in the unit that reads best: from 1 GiB up, GiB, TiB, PiB
// or EiB with two decimals ("15.82 GiB", "2.50 TiB"), as OOM messages print
// the figures it is compared with; below, the largest unit in which it is at
// least 1, with three significant digits as NumPy prints them ("300 MiB",
// "12.0 MiB", "3.25 MiB", "812 KiB"); under 1 KiB, bytes ("512 bytes").
// Two decimals of GiB would say "0.01 GiB" for 12 MiB. Negative sizes (a
// difference) keep their sign.
func Size(b int64) string {
	a := math.Abs(float64(b))
	for _, u := range bigUnits {
		if a >= u.div {
			return strconv.FormatFloat(float64(b)/u.div, 'f', 2, 64) + " " + u.name
		}
	}
	unit, div := "", 1.0
	switch {
	case a >= mib:
		unit, div = "MiB", mib
	case a >= kib:
		unit, div = "KiB", kib
	default:
		return strconv.FormatInt(b, 10) + " bytes"
	}
	v := float64(b) / div
	prec := 0
	switch av := math.Abs(v); {
	case av < 9.995:
		prec = 2
	case av < 99.95:
		prec = 1
	}
	return strconv.FormatFloat(v, 'f', prec, 64) + " " + unit
}

// Bytes is Size of an unsigned count (a capacity, a peak), clamped to the
// int64 range.
func Bytes(b uint64) string {
	if b > 1<<63-1 {
		b = 1<<63 - 1
	}
	return Size(int64(b))
}
