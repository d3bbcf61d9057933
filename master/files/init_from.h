// `shmtrain train --init-from W.npz`: a run's first parameters from a NumPy .npz archive whose
// arrays are named and shaped as `shmtrain export` writes them (master/files/export.h), which
// is what PyTorch's state_dict() of the same network gives, saved with
//   numpy.savez(path, **{k: v.numpy() for k, v in model.state_dict().items()})
// (docs/models.md, "Starting from weights: --init-from").
//
// One naming and one layout: TorchLayers (export.h) says which arrays the model has, their
// names, PyTorch shapes and places in the flat vector, and nn::FromTorch turns PyTorch's layout
// into ours, the inverse of what the export does with nn::ToTorch. Buffers (batch norm's
// running_mean, running_var, num_batches_tracked) are read too: they are in the flat vector.
//
// What the file must hold, checked before a value is read:
//   - every array of the model, and no other, except the export's arrays that are not
//     parameters ("input.offset", "input.scale", "classes", "layers", "activation", "model",
//     "input_shape", "loss"), which are accepted and never read: the run's own data and flags
//     decide the scaling, the classes and the model;
//   - each array float32 ('<f4'), or int64 ('<i8') for a buffer PyTorch keeps as an integer
//     (num_batches_tracked, 0-d), in exactly the shape the model (on the data's input) gives it.
// Then the values: finite, a count not negative, a running variance not negative
// (CheckRunningVariances), each member's CRC-32 and length as the archive states them. The
// archive is read by the data files' reader (data/byte_stream.h: stored or deflated members,
// zip64), which refuses a size a header states beyond what the file holds before it allocates.
#pragma once

#include <string>
#include <vector>

#include "shmtrain/model_spec.h"
#include "shmtrain/status.h"

namespace shmtrain::master {

// Reads `path` into *params, spec's flat vector (ParamCount() values), after checking every
// array as above. spec must resolve (its input known: the data's). Status::Data naming the file
// and the array (a missing, extra or misshapen one with the shape wanted and the shape found)
// on any refusal (exit 2), with *params untouched.
Status ReadInitFrom(const std::string& path, const ModelSpec& spec, std::vector<float>* params);

}  // namespace shmtrain::master
