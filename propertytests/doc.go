// Package propertytests holds rapid state-machine tests that run every lock
// script both in the reference model (package model) and on a Redis (through
// package lua), and require identical replies, keys and published messages
// after every step, plus the model's invariants on what Redis holds.
//
// Backends: miniredis, with virtual time and exact comparison; and a real
// redis-server (started by the tests, or $REDIS_ADDR), with keys namespaced
// per sequence and server-clock values compared within a stated tolerance.
//
// The package has only tests. Run it with
//
//	go test ./propertytests/                       # 100 sequences per machine
//	RAPID_CHECKS=1000 go test ./propertytests/     # CI
//
// See README.md in this directory for the soak run and the broken variants.
package propertytests
