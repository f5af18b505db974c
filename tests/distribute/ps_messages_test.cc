// What the parameter server's processes say to each other
// (detail/ps_messages.h): each shard's pieces of values and gradients land
// in exactly their rows, the messages round-trip, and impossible counts or
// orders are refused.
#include "tandem/distribute/detail/ps_messages.h"

#include <gtest/gtest.h>

#include <vector>

#include "tandem/base/error.h"
#include "tandem/optim/optimizer.h"

namespace tandem::distribute::detail {
namespace {

// Variables of 600 x 256, 3 x 4 and a scalar, with gradient buffers:
// the first (600 KiB) is split over 2 shards at a 256 KiB minimum.
std::vector<Variable> model(float offset) {
  std::vector<Variable> vars;
  for (const Shape& shape : {Shape{600, 256}, Shape{3, 4}, Shape{}}) {
    std::vector<float> values(static_cast<size_t>(shape.numel()));
    for (size_t i = 0; i < values.size(); ++i) values[i] = offset + 0.001f * static_cast<float>(i);
    Variable v(Tensor::from_floats(shape, values), true);
    v.set_grad_buffer(Tensor::zeros(shape, DType::f32));
    vars.push_back(v);
  }
  return vars;
}

EngineOptions two_shards() {
  EngineOptions options;
  options.parameter_server.shards = 2;
  return options;
}

TEST(PsMessages, EachShardsValuesLandInTheirRowsOnly) {
  const std::vector<Variable> from = model(1.0f);
  const std::vector<VariablePiece> pieces = server_pieces(from, two_shards());
  int split = 0;
  for (const VariablePiece& p : pieces) split += p.variable == 0 ? 1 : 0;
  ASSERT_EQ(split, 2) << "the large variable should be split over both shards";
  std::vector<Variable> into = model(0.0f);
  FrameWriter out;
  write_shard_values(out, pieces, 1, from);
  FrameReader in(out.bytes(), "shard 1's values");
  read_shard_values(in, pieces, 1, into);
  EXPECT_TRUE(in.done());
  for (const VariablePiece& p : pieces) {
    const std::vector<float> got = piece_of(into[p.variable].value(), p).to_floats();
    const std::vector<float> sent = piece_of(from[p.variable].value(), p).to_floats();
    const std::vector<float> kept = piece_of(model(0.0f)[p.variable].value(), p).to_floats();
    EXPECT_EQ(got, p.shard == 1 ? sent : kept)
        << "variable " << p.variable << " rows " << p.begin << ".." << p.end;
  }
}

TEST(PsMessages, GradientsKeepWhichVariablesHaveOneAndTheNormsAddUp) {
  std::vector<Variable> from = model(1.0f);
  for (size_t i : {0u, 2u}) {
    Tensor g = from[i].grad_buffer();
    g.fill(0.5f);
    from[i].define_grad();
  }
  from[1].zero_grad();  // no gradient: it must arrive as none
  const std::vector<VariablePiece> pieces = server_pieces(from, two_shards());
  std::vector<Variable> into = model(0.0f);
  for (Variable& v : into) v.zero_grad();
  double squares = 0.0;
  for (int shard = 0; shard < 2; ++shard) {
    FrameWriter out;
    write_shard_gradients(out, pieces, shard, from);
    FrameReader in(out.bytes(), "gradients");
    read_shard_gradients(in, pieces, shard, into);
    EXPECT_TRUE(in.done());
    squares += shard_gradient_squares(pieces, shard, from);
  }
  EXPECT_TRUE(into[0].has_grad());
  EXPECT_FALSE(into[1].has_grad());
  EXPECT_TRUE(into[2].has_grad());
  EXPECT_EQ(into[0].grad().to_floats(), from[0].grad().to_floats());
  EXPECT_DOUBLE_EQ(squares, optim::gradient_squares(from));
}

TEST(PsMessages, MessagesRoundTrip) {
  FrameWriter out;
  write_work(
      out,
      {.step = 7, .global_rows = 96, .divisor = 48, .scale = 1024.0, .version = 5, .share = 3});
  write_report(out, {.rows = 48,
                     .loss_sum = 2.5,
                     .finite = false,
                     .forward_seconds = 0.1,
                     .backward_seconds = 0.2,
                     .reports = {1, 2},
                     .shard_squares = {3, 4, 5}});
  write_update(out, {.advance = true,
                     .step = true,
                     .sources = {{1, 2}, {0, 9}},
                     .discards = {{2, -1}},
                     .factor = 1.5,
                     .learning_rate = 0.05,
                     .clip_norm = 0.0,
                     .report_squares = true});
  write_named_tensors(out,
                      {{"0.momentum", Tensor::from_floats(Shape{2}, std::vector<float>{1, 2})}});
  FrameReader in(out.bytes(), "messages");
  const WorkOrder w = read_work(in);
  EXPECT_EQ(w.step, 7);
  EXPECT_EQ(w.divisor, 48);
  EXPECT_EQ(w.version, 5);
  EXPECT_EQ(w.share, 3);
  const GradientReport r = read_report(in);
  EXPECT_FALSE(r.finite);
  EXPECT_EQ(r.reports, (std::vector<double>{1, 2}));
  EXPECT_EQ(r.shard_squares, (std::vector<double>{3, 4, 5}));
  const ShardUpdate u = read_update(in);
  EXPECT_TRUE(u.advance && u.step && u.report_squares);
  ASSERT_EQ(u.sources.size(), 2u);
  EXPECT_EQ(u.sources[1].worker, 0);
  EXPECT_EQ(u.sources[1].share, 9);
  EXPECT_EQ(u.discards.front().share, -1);
  EXPECT_EQ(u.factor, 1.5);
  const auto state = read_named_tensors(in);
  ASSERT_EQ(state.size(), 1u);
  EXPECT_EQ(state.front().first, "0.momentum");
  EXPECT_EQ(state.front().second.to_floats(), (std::vector<float>{1, 2}));
  EXPECT_TRUE(in.done());
}

TEST(PsMessages, ImpossibleClaimsAreIoErrors) {
  FrameWriter zero_divisor;
  write_work(zero_divisor, {.global_rows = 96, .divisor = 0});
  FrameReader work(zero_divisor.bytes(), "work");
  EXPECT_THROW(read_work(work), IoError);
  // An update claiming 2^40 gradients: refused before anything is sized by it.
  FrameWriter many;
  many.u64(1);
  many.u64(1);
  many.u64(uint64_t{1} << 40);
  FrameReader update(many.bytes(), "update");
  EXPECT_THROW(read_update(update), IoError);
  FrameWriter reports;
  write_report(reports, {});
  std::string bytes = reports.bytes();
  bytes[5 * 8] = 0x7f;  // the report count's low byte: 127 values that are not there
  FrameReader cut(bytes, "report");
  EXPECT_THROW(read_report(cut), IoError);
  // Values of the wrong shape for the rows they should fill.
  std::vector<Variable> small = model(0.0f);
  FrameWriter wrong;
  wrong.tensor(Tensor::zeros(Shape{5}, DType::f32));
  const std::vector<VariablePiece> pieces = server_pieces(small, two_shards());
  FrameReader values(wrong.bytes(), "values");
  EXPECT_THROW(read_shard_values(values, pieces, 0, small), IoError);
}

}  // namespace
}  // namespace tandem::distribute::detail
