#include "master/files/predict.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/image_folder.h"
#include "data/pipeline.h"
#include "data/preprocess.h"
#include "master/files/model_file.h"
#include "master/files/output_path.h"
#include "master/files/output_write.h"
#include "nn/metrics.h"
#include "nn/model.h"

namespace shmtrain::master {

// Image folders: the files a load left out, said once per data set.
void WarnSkippedFiles(const data::Dataset& d, const std::string& src, Logger& log) {
  if (const std::string w = data::SkippedFilesWarning(d, src); !w.empty()) {
    log.Info(w, JsonLine("files_left_out")
                    .Str("data", src)
                    .Int("files", d.skipped_files)
                    .Str("first", d.first_skipped));
  }
}

namespace {

// "784-256-10 relu" for an MLP, as the releases before layers said it; the model text on its
// input shape otherwise.
std::string Describe(const Model& m) {
  std::vector<int> sizes;
  Activation activation;
  std::string s;
  if (m.spec.AsMlp(&sizes, &activation)) {
    for (size_t i = 0; i < sizes.size(); ++i) s += (i ? "-" : "") + std::to_string(sizes[i]);
    s += std::string(" ") + ToString(activation);
  } else {
    s = m.spec.Text() + " on " + m.spec.input.Text();
  }
  s += std::string(", ") + ToString(m.spec.loss) + ", normalize " + ToString(m.norm.kind);
  if (m.spec.loss == Loss::kXent) s += ", " + std::to_string(m.classes.size()) + " classes";
  return s;
}

// The rows the model is applied to, for messages that number them.
std::string RowsOf(const Command& cmd) {
  return cmd.train.val_split > 0 ? "the held-out rows of " + cmd.train.data_path
                                 : cmd.train.data_path;
}

// The rows the model is applied to: the file (or its held-out part), scaled as in training.
Status LoadFor(const Command& cmd, const Model& m, bool labels, Logger& log, data::Dataset* out) {
  const TrainOptions& o = cmd.train;
  data::Dataset all;
  if (Status s =
          data::LoadForModel(o.data_path, o.file, m.spec, m.classes, cmd.model_path, labels, &all);
      !s.ok()) {
    return s;
  }
  WarnSkippedFiles(all, o.data_path, log);
  if (o.val_split > 0) {
    data::Dataset train;
    if (Status s = data::SplitValidation(std::move(all), o.val_split, o.seed, &train, out); !s.ok())
      return s;
  } else {
    *out = std::move(all);
  }
  return m.norm.Apply(out, RowsOf(cmd));
}

Status Load(const Command& cmd, Logger& log, Model* m) {
  if (Status s = LoadModel(cmd.model_path, m); !s.ok()) return s;
  log.Info("model " + cmd.model_path + ": " + Describe(*m),
           JsonLine("model").Str("path", cmd.model_path).Str("model", Describe(*m)));
  return Status::Ok();
}

// A class name as an RFC 4180 field: quoted (with "" for ") when it holds a comma, a quote or
// a line break, so that labels the loader accepts ("cat, black") give well-formed output.
std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (const char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// Outputs of the model that are not finite (NaN or infinite) in some rows: exit 5, as a
// divergence, naming the rows; `what` says which outputs.
Status NonFiniteOutputs(const Command& cmd, const nn::NonFiniteRows& rows,
                        const std::string& what) {
  return Status::Diverged(RowsOf(cmd) + ": the model " + cmd.model_path +
                          " gives outputs that are not finite (NaN or infinite) in " + rows.Text() +
                          what);
}

// One row's outputs zi (out values) as a line of predict's CSV: the value, or the class and
// every class's probability.
void AppendPrediction(const Model& m, const float* zi, int out, std::string* text) {
  if (m.spec.loss != Loss::kXent) {
    *text += Fmt("%.9g", zi[0]) + "\n";
    return;
  }
  // The outputs are the softmax probabilities; the class is the most probable one
  // (ties: the first), as eval counts it.
  int best = 0;
  for (int j = 1; j < out; ++j) {
    if (zi[j] > zi[best]) best = j;
  }
  *text += CsvField(m.classes.names[best]);
  for (int j = 0; j < out; ++j) *text += "," + Fmt("%.6g", zi[j]);
  *text += "\n";
}

// Predict's CSV: a header line, then a line for each row of d whose outputs are finite; the
// others go into *bad. Rows read from an image folder start with their file's path.
std::string PredictionsCsv(const Model& m, const data::Dataset& d, nn::NonFiniteRows* bad) {
  const bool xent = m.spec.loss == Loss::kXent;
  const bool named = !d.row_names.empty();
  const int out = m.spec.outputs();
  std::string text = named ? "path," : "";
  if (xent) {
    text += "class";
    for (const std::string& name : m.classes.names) text += "," + CsvField("p_" + name);
  } else {
    text += "value";
  }
  text += "\n";
  const int64_t kChunk = nn::EvalChunk(m.spec);
  nn::Workspace<float> ws;
  std::vector<float> z;
  for (int64_t r0 = 0; r0 < d.rows; r0 += kChunk) {
    const int64_t k = std::min(kChunk, d.rows - r0);
    z.resize(static_cast<size_t>(k * out));
    nn::Predict<float>(m.spec, m.params.data(), d.x.data() + r0 * d.features, k, z.data(), ws);
    for (int64_t i = 0; i < k; ++i) {
      const float* zi = z.data() + i * out;
      if (!std::all_of(zi, zi + out, [](float v) { return std::isfinite(v); })) {
        bad->Add(r0 + i);
        continue;
      }
      if (named) text += CsvField(d.row_names[static_cast<size_t>(r0 + i)]) + ",";
      AppendPrediction(m, zi, out, &text);
    }
  }
  return text;
}

}  // namespace

Status RunEval(const Command& cmd, Logger& log) {
  Model m;
  if (Status s = Load(cmd, log, &m); !s.ok()) return s;
  data::Dataset d;
  if (Status s = LoadFor(cmd, m, true, log, &d); !s.ok()) return s;
  const nn::Metrics r = nn::Evaluate(m.spec, m.params.data(), d.x.data(), d.y.data(), d.rows);
  if (!r.finite()) return NonFiniteOutputs(cmd, r.nonfinite, ", so its loss is not finite either");
  JsonLine j("eval");
  j.Str("data", cmd.train.data_path).Int("rows", d.rows).Num("loss", r.loss);
  std::string text = "eval: " + std::to_string(d.rows) + " rows, loss " + Fmt("%.6g", r.loss);
  if (m.spec.loss == Loss::kXent) {
    j.Num("accuracy", r.accuracy);
    text += ", accuracy " + Fmt("%.4f", r.accuracy);
  } else {
    j.Num("rmse", r.rmse);
    text += ", rmse " + Fmt("%.6g", r.rmse);
  }
  log.Line(text, j);
  return log.stdout_status();
}

Status RunPredict(const Command& cmd, Logger& log) {
  // Before anything is read: --out must be writable and must not overwrite an input.
  if (Status s = CheckOutputPath("--out", cmd.out_path,
                                 {{"--model", cmd.model_path}, {"--data", cmd.train.data_path}});
      !s.ok()) {
    return s;
  }
  OutputLock out_lock;
  if (Status s = OutputLock::Acquire("--out", cmd.out_path, &out_lock); !s.ok()) return s;
  Model m;
  if (Status s = Load(cmd, log, &m); !s.ok()) return s;
  data::Dataset d;
  if (Status s = LoadFor(cmd, m, false, log, &d); !s.ok()) return s;
  const bool xent = m.spec.loss == Loss::kXent;
  nn::NonFiniteRows bad;
  const std::string text = PredictionsCsv(m, d, &bad);
  if (!bad.empty()) {
    return NonFiniteOutputs(cmd, bad,
                            std::string(xent ? " (the class probabilities)" : " (the values)") +
                                "; nothing was written");
  }
  if (cmd.out_path.empty()) {
    if (Status s = WriteStdout(text); !s.ok()) return s;
  } else {
    if (Status s = WriteFileDurably(cmd.out_path, text); !s.ok()) return s;
    log.Info("predict: " + std::to_string(d.rows) + " rows written to " + cmd.out_path,
             JsonLine("predict").Str("out", cmd.out_path).Int("rows", d.rows));
  }
  return Status::Ok();
}

}  // namespace shmtrain::master
