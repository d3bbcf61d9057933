// The owner's rule of async across hosts (master/hosts/param_server.h, OwnedPart) against the
// paper's server update worked by hand, and the summary's cross-host totals.
#include "master/hosts/param_server.h"
#include "master/kinds/kind.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "master/run/run_summary.h"

namespace shmtrain::master {
namespace {

nn::RuleParams Rule(AsyncRule r, double lambda) {
  nn::RuleParams rp;
  rp.rule = r;
  rp.lambda0 = lambda;
  rp.ms_decay = 0.9;
  rp.epsilon = 1e-7;
  return rp;
}

constexpr double kTol = 2e-6;

TEST(OwnedPart, AsgdAddsEveryPushAndCountsTheOthersSinceTheLastPull) {
  const std::vector<float> w0 = {1.0f, -2.0f, 0.5f};
  OwnedPart part(w0.data(), 3, 3, Rule(AsyncRule::kAsgd, 0));
  const std::vector<float> d0 = {0.1f, 0.2f, -0.3f}, d1 = {-0.05f, 0.0f, 0.25f};
  const auto a = part.Apply(0, d0.data(), 2, 0.1, -1, 1);
  EXPECT_TRUE(a.applied);
  EXPECT_EQ(a.tau, 0u);
  const auto b = part.Apply(1, d1.data(), 5, 0.1, -1, 1);
  EXPECT_EQ(b.tau, 1u);  // host 0's push came in since host 1 pulled
  const auto c = part.Apply(2, d1.data(), 1, 0.1, -1, 1);
  EXPECT_EQ(c.tau, 2u);
  const auto d = part.Apply(0, d0.data(), 1, 0.1, -1, 1);
  EXPECT_EQ(d.tau, 2u);  // hosts 1 and 2 since host 0's reply
  EXPECT_EQ(part.version(), 4u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(part.values()[i], w0[i] + 2 * d0[i] + 2 * d1[i], kTol) << i;
  }
}

// g = -delta / (lr k); G += delta - lr k lambda g^2 (G - Bak[h]), Bak[h] what h last pulled.
TEST(OwnedPart, ConstantLambdaCompensatesAgainstThePushersBackup) {
  const double lr = 0.05, lambda = 3.0;
  const std::vector<float> w0 = {0.3f, -0.7f};
  OwnedPart part(w0.data(), 2, 2, Rule(AsyncRule::kDcAsgdC, lambda));
  const std::vector<float> d0 = {0.02f, -0.04f}, d1 = {-0.03f, 0.01f};
  part.Apply(0, d0.data(), 1, lr, -1, 1);  // host 0's backup is G: nothing to compensate
  std::vector<double> g_after0(2);
  for (int i = 0; i < 2; ++i) {
    g_after0[i] = w0[i] + d0[i];
    EXPECT_NEAR(part.values()[i], g_after0[i], kTol);
  }
  const int64_t k = 4;
  part.Apply(1, d1.data(), k, lr, -1, 1);  // host 1 computed from w0; G moved by d0 since
  for (int i = 0; i < 2; ++i) {
    const double g = -d1[i] / (lr * k);
    const double want = g_after0[i] + d1[i] - lr * k * lambda * g * g * (g_after0[i] - w0[i]);
    EXPECT_NEAR(part.values()[i], want, kTol) << i;
    // The compensation is there: without it the value would be g_after0 + d1.
    EXPECT_GT(std::abs(want - (g_after0[i] + d1[i])), 1e-5) << i;
  }
}

TEST(OwnedPart, AdaptiveLambdaKeepsAMeanSquarePerHost) {
  const double lr = 0.1, lambda0 = 2.0, m = 0.9, eps = 1e-7;
  const std::vector<float> w0 = {1.0f};
  OwnedPart part(w0.data(), 1, 2, Rule(AsyncRule::kDcAsgdA, lambda0));
  const std::vector<float> d0 = {-0.2f}, d1 = {0.1f}, d1b = {0.05f};
  part.Apply(0, d0.data(), 1, lr, -1, 1);
  double G = w0[0] + d0[0];
  double ms1 = 0;
  // Host 1, twice: its own MeanSquare, never host 0's.
  double bak1 = w0[0];
  for (const float d : {d1[0], d1b[0]}) {
    const double g = -d / lr;
    ms1 = m * ms1 + (1 - m) * g * g;
    const double lam = lambda0 / std::sqrt(ms1 + eps);
    G = G + d - lr * lam * g * g * (G - bak1);
    part.Apply(1, &d, 1, lr, -1, 1);
    EXPECT_NEAR(part.values()[0], G, 1e-5);
    bak1 = G;  // host 1 pulled G with the reply
  }
}

TEST(OwnedPart, APushStalerThanTheBoundIsDroppedAndThePusherResynchronises) {
  const std::vector<float> w0 = {0.0f, 0.0f};
  OwnedPart part(w0.data(), 2, 2, Rule(AsyncRule::kAsgd, 0));
  const std::vector<float> d = {1.0f, 1.0f};
  part.Apply(0, d.data(), 1, 0.1, 0, 1);
  part.Apply(0, d.data(), 1, 0.1, 0, 1);
  const auto stale = part.Apply(1, d.data(), 1, 0.1, 1, 1);  // two of host 0's since host 1 pulled
  EXPECT_FALSE(stale.applied);
  EXPECT_EQ(stale.tau, 2u);
  EXPECT_EQ(part.version(), 2u);
  EXPECT_NEAR(part.values()[0], 2.0f, kTol);
  const auto fresh = part.Apply(1, d.data(), 1, 0.1, 1, 1);  // it pulled with the drop's reply
  EXPECT_TRUE(fresh.applied);
  EXPECT_EQ(fresh.tau, 0u);
  EXPECT_NEAR(part.values()[1], 3.0f, kTol);
}

// A sync point: every host's backup is G and its staleness starts again from zero, so a push
// made from G is applied without compensation even with a huge lambda.
TEST(OwnedPart, AfterASyncPointEveryHostsBackupIsThePart) {
  const std::vector<float> w0 = {0.5f, -0.5f};
  OwnedPart part(w0.data(), 2, 2, Rule(AsyncRule::kDcAsgdC, 1e6));
  const std::vector<float> d = {0.01f, -0.02f};
  part.Apply(0, d.data(), 1, 0.1, -1, 1);
  part.EveryHostPulled();
  const std::vector<float> g = {part.values()[0], part.values()[1]};
  const auto o = part.Apply(1, d.data(), 1, 0.1, -1, 1);
  EXPECT_EQ(o.tau, 0u);
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(part.values()[i], g[i] + d[i], kTol) << i;
}

TEST(CrossHostTotals, QuantilesOfTheStaleness) {
  CrossHostTotals c;
  c.tau_counts = {5, 3, 1, 0, 1};  // tau 0 x5, 1 x3, 2 x1, 4+ x1
  EXPECT_EQ(c.TauQuantile(0.5), 0u);
  EXPECT_EQ(c.TauQuantile(0.6), 1u);
  EXPECT_EQ(c.TauQuantile(0.9), 2u);
  EXPECT_EQ(c.TauQuantile(1.0), 4u);
  EXPECT_EQ(CrossHostTotals{}.TauQuantile(0.5), 0u);
}

TEST(CrossHostTotals, TheSummaryReportsEveryHostsUpdates) {
  RunSummary s;
  s.hosts = 2;
  s.end_step = s.param_version = 7;  // host 0's own
  s.cross.host_updates = {7, 6};
  s.cross.samples = 13 * 32;
  s.cross.staleness_sum = 9;
  s.cross.sent = 11;
  s.cross.applied = 10;
  s.cross.dropped = 1;
  s.cross.tau_sum = 5;
  s.cross.tau_counts = {6, 3, 1};
  KindOf(Mode::kAsync, 2).AddTotals(&s, 32);
  EXPECT_EQ(s.end_step, 13);
  EXPECT_EQ(s.param_version, 13);
  const std::string j = SummaryJson(KindOf(Mode::kAsync, 2), s).Done();
  for (const char* field :
       {"\"updates\":13", "\"host_updates\":[7,6]", "\"pushes_sent\":11", "\"pushes_applied\":10",
        "\"pushes_dropped\":1", "\"cross_staleness_mean\":0.5", "\"cross_staleness_p90\":1"}) {
    EXPECT_NE(j.find(field), std::string::npos) << field << " in " << j;
  }
  const std::string text = SummaryText(KindOf(Mode::kAsync, 2), s);
  EXPECT_NE(text.find("pushes 11 sent, 10 applied, 1 dropped"), std::string::npos) << text;
}

}  // namespace
}  // namespace shmtrain::master
