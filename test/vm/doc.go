// SPDX-License-Identifier: Apache-2.0

//go:build linux

// Package vm runs tests of this repository inside QEMU virtual machines
// (TCG, no KVM needed) on the kernels and CPUs users run but this machine
// is not: Debian 12's 6.1 cloud kernels for amd64 and arm64, where BPF
// trampolines (fentry) are allowed. TestVM builds each listed package's
// test binary static for the guest (CGO_ENABLED=0 go test -c), the C
// fixtures those tests start (cross-compiled, see fixtures.go), packs them
// with a busybox and guestinit into an initramfs, boots the kernel, and
// reports every guest test as a subtest of the host's TestVM.
//
// The kernels and tools come from `make vm-deps` (run by make test and
// make test-vm): OTELCTX_VM_DIR names the directory holding
// KERNEL/vmlinuz and busybox-ARCH.
package vm
