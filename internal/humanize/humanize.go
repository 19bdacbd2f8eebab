// Package humanize formats byte counts the way gpuguard prints them, in
// binary units (1 GiB = 2^30 bytes), as PyTorch, nvidia-smi and the kernel do.
package humanize

import (
	"fmt"
	"strconv"
)

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
	tib = 1 << 40
)

// Bytes formats b in the largest unit that keeps it at least 1: "1.50 GiB",
// "512 MiB", "3 KiB", "12 B" (two decimals from GiB up, none below).
func Bytes(b uint64) string {
	switch {
	case b >= tib:
		return fmt.Sprintf("%.2f TiB", float64(b)/tib)
	case b >= gib:
		return fmt.Sprintf("%.2f GiB", float64(b)/gib)
	case b >= mib:
		return fmt.Sprintf("%.0f MiB", float64(b)/mib)
	case b >= kib:
		return fmt.Sprintf("%.0f KiB", float64(b)/kib)
	}
	return fmt.Sprintf("%d B", b)
}

// GiB formats b in GiB with two decimals, as an OOM message's figures are
// compared: "9.00 GiB"; below 100 MiB the MiB figure follows, since two
// decimals of GiB hide it ("0.02 GiB (20.00 MiB)"); zero is "0 GiB".
func GiB(b int64) string {
	g := float64(b) / gib
	switch {
	case b == 0:
		return "0 GiB"
	case b < 100*mib:
		return fmt.Sprintf("%.2f GiB (%.2f MiB)", g, float64(b)/mib)
	}
	return fmt.Sprintf("%.2f GiB", g)
}

// GiBFigure is b in GiB with two decimals and no unit ("2.50"), for a list
// of figures that names the unit once.
func GiBFigure(b int64) string {
	return strconv.FormatFloat(float64(b)/gib, 'f', 2, 64)
}
