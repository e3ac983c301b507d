// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsvar

import (
	"encoding/binary"
	"errors"
)

// TLS relocations: how a module that only references the variable is seen.
// scanRelocs reads DT_RELA (past its leading DT_RELACOUNT relative ones)
// and DT_JMPREL (lazily bound TLSDESC lives there). Only the TLS kinds
// name a symbol worth looking at; its name is compared in place.
func (e *elfReader) scanRelocs(ef *elfFacts) error {
	desc, mod, off, tpoff := tlsRelocTypes(e.arch)
	// Relocations name the same few symbols over and over.
	var lastSym uint32
	var lastName string
	classify := func(typ, rsym uint32) error {
		if typ != desc && typ != mod && typ != off && typ != tpoff {
			return nil
		}
		if rsym == 0 {
			classifyReloc(&ef.relocs, e.arch, typ, 0, 1)
			return nil
		}
		if rsym != lastSym {
			lastSym, lastName = rsym, ""
			nameOff, s, err := e.sym(rsym)
			if err != nil {
				if errors.Is(err, errMalformed) {
					return nil // past the table: names nothing
				}
				return err
			}
			for _, n := range []string{SymbolName, NodeSymbolName} {
				ok, err := e.nameIs(nameOff, n)
				if err != nil {
					return err
				}
				if ok {
					lastName = n
					// An undefined reference is not in DT_GNU_HASH: the
					// relocation is where it shows (only reported when no
					// module defines the variable).
					if !ef.sym.found {
						ef.sym, ef.symName = s, n
					}
					break
				}
			}
		}
		switch lastName {
		case SymbolName:
			classifyReloc(&ef.relocs, e.arch, typ, 1, 1)
		case NodeSymbolName:
			classifyReloc(&ef.nodeRelocs, e.arch, typ, 1, 1)
		}
		return nil
	}
	skip := min(e.relacount, e.relasz/relaSize) * relaSize
	if err := e.scanRela(e.rela+skip, e.relasz-skip, classify); err != nil {
		return err
	}
	if e.pltrelIsRela {
		return e.scanRela(e.jmprel, e.pltrelsz, classify)
	}
	return nil
}

func tlsRelocTypes(a Arch) (desc, mod, off, tpoff uint32) {
	if a == ARM64 {
		return rAArch64TLSDESC, rAArch64DTPMOD64, rAArch64DTPREL64, rAArch64TPREL64
	}
	return rX8664TLSDESC, rX8664DTPMOD64, rX8664DTPOFF64, rX8664TPOFF64
}

// scanRela reads a relocation table in scratch-sized chunks.
func (e *elfReader) scanRela(vaddr, size uint64, each func(typ, sym uint32) error) error {
	if vaddr == 0 || size < relaSize {
		return nil
	}
	size -= size % relaSize
	start, ok := e.fileOff(vaddr, size)
	if !ok {
		return malformed("relocation table at %#x (%d bytes) not in the file", vaddr, size)
	}
	chunk := len(e.r.scratch) / relaSize * relaSize
	for done := uint64(0); done < size; {
		n := min(size-done, uint64(chunk))
		b := e.r.scratch[:n]
		if err := e.r.readDirect(b, start+done); err != nil {
			return err
		}
		for i := 0; i+relaSize <= len(b); i += relaSize {
			info := binary.LittleEndian.Uint64(b[i+8:])
			if err := each(uint32(info), uint32(info>>32)); err != nil {
				return err
			}
		}
		done += n
	}
	return nil
}
