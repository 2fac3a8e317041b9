"""The cost model's vocabulary and walks, one module each: the device (roofline), gathers, the row walks
and the edge-parallel SpMM walks. Op specs name their models from here (`OpSpec.cost_models`);
scheduler/estimate.py ranks schedules with them."""
