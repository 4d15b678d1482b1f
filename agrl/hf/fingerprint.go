package hf

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// fingerprintBlocks and fingerprintBlock are how many pieces of each weight file Fingerprint
// reads, and their size: a few hundred kilobytes in all, whatever the model's size.
const fingerprintBlocks, fingerprintBlock = 64, 4096

// Fingerprint returns a digest of the weight files of the checkpoint in dir (model.safetensors,
// or the shards model.safetensors.index.json names): each file's name and size and 64 blocks
// of 4 KiB spread evenly over it, the first holding its header. It is a sample, not a hash of
// every byte: it tells apart two checkpoints whose weights differ throughout (another model,
// another seed, a fine-tuned copy of the same shape) at the cost of reading a few hundred
// kilobytes a file, and it may miss a change confined to a few values. It covers the files'
// layout too: the same weights saved in other shards, or with other metadata in their headers,
// have another digest. A run records it to notice that the model directory it trained from
// holds other weight files now.
func Fingerprint(dir string) (string, error) {
	files := []string{SingleFile}
	if _, err := os.Stat(filepath.Join(dir, SingleFile)); errors.Is(err, fs.ErrNotExist) {
		data, err := os.ReadFile(filepath.Join(dir, IndexFile))
		if err != nil {
			return "", fmt.Errorf("hf: %w", err)
		}
		index, err := parseIndex(data)
		if err != nil {
			return "", fmt.Errorf("hf: %s: %w", filepath.Join(dir, IndexFile), err)
		}
		files = files[:0]
		for _, f := range index {
			if !slices.Contains(files, f) {
				files = append(files, f)
			}
		}
		slices.Sort(files)
	}
	h := sha256.New()
	buf := make([]byte, fingerprintBlock)
	for _, name := range files {
		if err := fingerprintFile(h, filepath.Join(dir, name), name, buf); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:16]), nil
}

// fingerprintFile writes file path's name, size and sampled blocks to h, reading through buf.
func fingerprintFile(h io.Writer, path, name string, buf []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	size := fi.Size()
	fmt.Fprintf(h, "%s\x00%d\x00", name, size)
	for i := range int64(fingerprintBlocks) {
		off := i * (size / fingerprintBlocks)
		n, err := f.ReadAt(buf, off)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("hf: %w", err)
		}
		h.Write(buf[:n]) // short (or empty) at the end of a file shorter than the blocks
	}
	return nil
}
