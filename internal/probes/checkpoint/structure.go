package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Whether a checkpoint file is whole, from its own structure: the formats
// that say where they end. A torch.save file (.pt, .pth, Lightning's .ckpt,
// Hugging Face's pytorch_model.bin) is a zip archive, and a zip's
// end-of-central-directory record is written last; a safetensors file
// starts with its header's length, and the header gives the end of every
// tensor. A file cut short when its writer died lacks the end. Read only:
// a few small reads at the start and the end of each file.

// Structure is what a checkpoint's format says of its completeness.
type Structure uint8

const (
	// StructureUnknown: no format gpuguard can check (a pickle, an HDF5
	// file, a directory of such files).
	StructureUnknown Structure = iota
	// StructureComplete: the format's end is present and consistent.
	StructureComplete
	// StructureTruncated: the format says there should be more.
	StructureTruncated
)

func (s Structure) String() string {
	switch s {
	case StructureComplete:
		return "complete"
	case StructureTruncated:
		return "truncated"
	}
	return "unknown"
}

// maxStructureFiles bounds the files of one directory checkpoint that are
// read (a sharded checkpoint's shards are each checked).
const maxStructureFiles = 256

// CheckStructure reads path (a file, or a directory checkpoint's files,
// four levels deep) and says whether its format is whole, and why, in
// words ("zip archive with its central directory", "safetensors header
// says 4096 bytes, the file has 1000"). A directory is truncated when any
// file in it is, complete when every file of a known format is and there
// is one. It never writes.
func CheckStructure(path string) (Structure, string) {
	fi, err := os.Stat(path)
	if err != nil {
		return StructureUnknown, err.Error()
	}
	if !fi.IsDir() {
		return checkFile(path, fi.Size())
	}
	known, seen := 0, 0
	var verdict Structure
	var why string
	root := filepath.Clean(path)
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || verdict == StructureTruncated {
			return filepath.SkipDir
		}
		if d.IsDir() {
			if strings.Count(p[len(root):], string(filepath.Separator)) > maxTreeDepth {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if seen++; seen > maxStructureFiles {
			return filepath.SkipAll
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		s, w := checkFile(p, info.Size())
		rel, _ := filepath.Rel(root, p)
		switch s {
		case StructureTruncated:
			verdict, why = s, rel+": "+w
		case StructureComplete:
			known++
		}
		return nil
	})
	if verdict == StructureTruncated {
		return verdict, why
	}
	if known > 0 {
		return StructureComplete, fmt.Sprintf("%d file(s) of a known format, each whole", known)
	}
	return StructureUnknown, "no file of a format with an end marker (zip, safetensors)"
}

// maxTreeDepth matches the watcher's depth inside directory checkpoints.
const maxTreeDepth = 4

func checkFile(path string, size int64) (Structure, string) {
	f, err := os.Open(path)
	if err != nil {
		return StructureUnknown, err.Error()
	}
	defer f.Close()
	var head [9]byte
	n, _ := io.ReadFull(f, head[:])
	switch {
	case n >= 4 && string(head[:4]) == "PK\x03\x04":
		return checkZip(f, size)
	case n == 9 && head[8] == '{':
		return checkSafetensors(f, size, binary.LittleEndian.Uint64(head[:8]))
	}
	return StructureUnknown, "not a zip or safetensors file"
}

// checkZip looks for the end-of-central-directory record at the end of a
// zip (torch.save's format) and checks that the central directory it
// points to lies inside the file and starts with its signature.
func checkZip(f *os.File, size int64) (Structure, string) {
	const eocdLen, maxComment = 22, 65535
	// Most archives have no comment: the record is the last 22 bytes. Read
	// the longest tail only when it is not.
	tailLen := min(size, eocdLen)
	tail := make([]byte, tailLen)
	if _, err := f.ReadAt(tail, size-tailLen); err != nil && err != io.EOF {
		return StructureUnknown, err.Error()
	}
	if tailLen < eocdLen || string(tail[:4]) != "PK\x05\x06" || binary.LittleEndian.Uint16(tail[20:]) != 0 {
		tailLen = min(size, eocdLen+maxComment)
		tail = make([]byte, tailLen)
		if _, err := f.ReadAt(tail, size-tailLen); err != nil && err != io.EOF {
			return StructureUnknown, err.Error()
		}
	}
	at := -1
	for i := len(tail) - eocdLen; i >= 0; i-- {
		if string(tail[i:i+4]) != "PK\x05\x06" {
			continue
		}
		if comment := int(binary.LittleEndian.Uint16(tail[i+20:])); i+eocdLen+comment == len(tail) {
			at = i
			break
		}
	}
	if at < 0 {
		return StructureTruncated, fmt.Sprintf("zip archive (%d bytes) without its end-of-central-directory record", size)
	}
	eocd := size - tailLen + int64(at)
	cdSize := int64(binary.LittleEndian.Uint32(tail[at+12:]))
	cdOff := int64(binary.LittleEndian.Uint32(tail[at+16:]))
	if cdOff == 0xFFFFFFFF || cdSize == 0xFFFFFFFF { // zip64: a locator precedes the record
		loc := make([]byte, 20)
		if eocd < 20 {
			return StructureTruncated, "zip64 archive without its locator"
		}
		if _, err := f.ReadAt(loc, eocd-20); err != nil || string(loc[:4]) != "PK\x06\x07" {
			return StructureTruncated, "zip64 archive without its locator"
		}
		rec := int64(binary.LittleEndian.Uint64(loc[8:]))
		r64 := make([]byte, 56)
		if rec < 0 || rec+56 > eocd {
			return StructureTruncated, "zip64 end record outside the file"
		}
		if _, err := f.ReadAt(r64, rec); err != nil || string(r64[:4]) != "PK\x06\x06" {
			return StructureTruncated, "zip64 end record missing"
		}
		cdSize = int64(binary.LittleEndian.Uint64(r64[40:]))
		cdOff = int64(binary.LittleEndian.Uint64(r64[48:]))
		eocd = rec
	}
	if cdOff < 0 || cdSize < 0 || cdOff+cdSize > eocd {
		return StructureTruncated, fmt.Sprintf("zip central directory (offset %d, %d bytes) does not fit before its end record at %d", cdOff, cdSize, eocd)
	}
	if cdSize > 0 {
		sig := make([]byte, 4)
		if _, err := f.ReadAt(sig, cdOff); err != nil || string(sig) != "PK\x01\x02" {
			return StructureTruncated, fmt.Sprintf("zip central directory not found at offset %d", cdOff)
		}
	}
	return StructureComplete, "zip archive with its central directory and end record"
}

// maxSafetensorsHeader bounds the header read (the format's own limit is
// 100 MB).
const maxSafetensorsHeader = 100 << 20

// checkSafetensors: 8 bytes of header length, the JSON header, then the
// tensors' bytes; the file must end where the last tensor does.
func checkSafetensors(f *os.File, size int64, hlen uint64) (Structure, string) {
	if hlen > maxSafetensorsHeader {
		return StructureUnknown, "not a safetensors file (header length too large)"
	}
	if int64(hlen)+8 > size {
		return StructureTruncated, fmt.Sprintf("safetensors header of %d bytes, the file has %d", hlen, size)
	}
	hdr := make([]byte, hlen)
	if _, err := f.ReadAt(hdr, 8); err != nil {
		return StructureUnknown, err.Error()
	}
	var tensors map[string]json.RawMessage
	if err := json.Unmarshal(bytes.TrimRight(hdr, " "), &tensors); err != nil {
		return StructureUnknown, "not a safetensors file (header is not JSON)"
	}
	var end int64
	for name, raw := range tensors {
		if name == "__metadata__" {
			continue
		}
		var t struct {
			Offsets []int64 `json:"data_offsets"`
		}
		if json.Unmarshal(raw, &t) != nil || len(t.Offsets) != 2 {
			return StructureUnknown, "not a safetensors file (tensor " + name + " has no data_offsets)"
		}
		end = max(end, t.Offsets[1])
	}
	want := 8 + int64(hlen) + end
	switch {
	case size < want:
		return StructureTruncated, fmt.Sprintf("safetensors header says %d bytes, the file has %d", want, size)
	case size > want:
		return StructureUnknown, fmt.Sprintf("safetensors header says %d bytes, the file has %d", want, size)
	}
	return StructureComplete, "safetensors file as long as its header says"
}
