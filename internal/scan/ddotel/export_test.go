package ddotel

// Check exposes Owners.check to the tests.
func (o *Owners) Check(idx uint32, tid int, s Slot) bool { return o.check(idx, tid, s) }
