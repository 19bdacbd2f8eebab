// Package examples holds gpuguard's example training job (train.py, a
// standard-library Python script) and its config. These tests run the real
// script with python3 in a copy of this directory and check what it prints,
// what it writes and how it exits; they skip when python3 is missing.
package examples
