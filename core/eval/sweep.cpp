#include "core/eval/sweep.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>

#include "core/io/json_read.h"

namespace varscope {
namespace {

double quality_value(const nlohmann::json& q) {
    return q.is_null() ? std::numeric_limits<double>::infinity() : q.get<double>();
}

// The quality axes: per-image metrics against the baseline, and the emoji network's accuracy
// and agreement with the baseline's predicted classes (manifest metrics.emoji). Higher is better.
void check_quality_metric(const std::string& metric) {
    for (const char* m :
         {"ssim", "psnr_db", "token_agreement", "emoji_accuracy", "emoji_agreement"})
        if (metric == m) return;
    throw std::invalid_argument(
        "--quality: expected ssim, psnr_db, token_agreement, emoji_accuracy or emoji_agreement, "
        "got '" +
        metric + "'");
}

// A config's emoji accuracy or agreement from the eval result (std::invalid_argument when the
// job did not score with the emoji network or counted no image).
nlohmann::json emoji_quality_of(const nlohmann::json& config, const std::string& metric) {
    const auto q = config.value("quality", nlohmann::json());
    const auto e = q.is_object() ? q.value("emoji", nlohmann::json()) : nlohmann::json();
    if (!e.is_object())
        throw std::invalid_argument("--quality " + metric +
                                    ": the eval result has no emoji metrics (add \"metrics\": "
                                    "{\"emoji\": true} to the manifest)");
    if (metric == "emoji_agreement")
        return config.at("name") == "baseline" ? nlohmann::json(1.0) : e.at("baseline_agreement");
    if (!e.at("accuracy").is_object())
        throw std::invalid_argument(
            "--quality emoji_accuracy: no image has a class to check "
            "(class -1, or prompts that name no class)");
    return e["accuracy"].at("rate");
}

std::string xml_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '<')
            out += "&lt;";
        else if (c == '>')
            out += "&gt;";
        else if (c == '&')
            out += "&amp;";
        else if (c == '"')
            out += "&quot;";
        else
            out += c;
    }
    return out;
}

std::string num(double v, int precision = 4) {
    std::ostringstream s;
    s.precision(precision);
    s << v;
    return s.str();
}

}  // namespace

SweepAxis parse_sweep_axis(const std::string& arg) {
    const std::string what = "--param '" + arg + "'";
    const auto eq = arg.find('=');
    const auto dot = arg.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq || dot == 0 ||
        dot + 1 == eq || eq + 1 == arg.size())
        throw std::invalid_argument(what +
                                    ": expected method.setting=v1,v2,... (e.g. "
                                    "fastvar.ratio=0.2,0.4)");
    SweepAxis a{arg.substr(0, dot), arg.substr(dot + 1, eq - dot - 1), {}};
    const std::string values = arg.substr(eq + 1);
    if (values[0] == '[') {
        const auto j = parse_json(values, what);
        if (!j.is_array() || j.empty())
            throw std::invalid_argument(what + ": expected a JSON list");
        a.values.assign(j.begin(), j.end());
    } else {
        std::stringstream in(values);
        std::string item;
        while (std::getline(in, item, ',')) {
            try {
                a.values.push_back(parse_json(item, what));
            } catch (const std::invalid_argument&) {
                throw std::invalid_argument(what + ": '" + item +
                                            "' is not a number or true/false");
            }
        }
    }
    if (a.values.empty()) throw std::invalid_argument(what + ": no values");
    return a;
}

void check_sweep_axes(const std::vector<SweepAxis>& axes, const std::vector<MethodSpec>& methods,
                      bool grid) {
    if (axes.empty() || axes.size() > 2)
        throw std::invalid_argument("sweep: give one or two --param settings, got " +
                                    std::to_string(axes.size()));
    if (axes.size() == 2 && axes[0].key() == axes[1].key())
        throw std::invalid_argument("sweep: " + axes[0].key() + " is given twice");
    if (!grid && axes.size() == 2 && axes[0].values.size() != axes[1].values.size())
        throw std::invalid_argument("sweep --list: " + axes[0].key() + " has " +
                                    std::to_string(axes[0].values.size()) + " values, " +
                                    axes[1].key() + " " + std::to_string(axes[1].values.size()));
    for (const auto& a : axes) {
        const auto m = std::find_if(methods.begin(), methods.end(),
                                    [&](const MethodSpec& s) { return s.id == a.method; });
        if (m == methods.end()) {
            std::string ids;
            for (const auto& s : methods) ids += (ids.empty() ? "" : ", ") + s.id;
            throw std::invalid_argument("sweep: no method '" + a.method + "' for this model (" +
                                        ids + ")");
        }
        const bool known = std::any_of(m->params.begin(), m->params.end(),
                                       [&](const ParamSpec& p) { return p.key == a.param; });
        if (!known) {
            std::string keys;
            for (const auto& p : m->params) keys += (keys.empty() ? "" : ", ") + p.key;
            throw std::invalid_argument("sweep: " + m->id + " has no setting '" + a.param +
                                        "' (settings: " + keys + ")");
        }
    }
}

std::vector<SweepPoint> sweep_points(const nlohmann::json& base, const std::vector<SweepAxis>& axes,
                                     bool grid) {
    std::vector<std::vector<size_t>> picks;
    if (axes.size() == 1 || !grid) {
        for (size_t i = 0; i < axes[0].values.size(); ++i)
            picks.push_back(std::vector<size_t>(axes.size(), i));
    } else {
        for (size_t i = 0; i < axes[0].values.size(); ++i)
            for (size_t k = 0; k < axes[1].values.size(); ++k) picks.push_back({i, k});
    }
    std::vector<SweepPoint> points;
    for (const auto& pick : picks) {
        SweepPoint p{"", base.is_object() ? base : nlohmann::json::object(),
                     nlohmann::json::object()};
        for (size_t a = 0; a < axes.size(); ++a) {
            const auto& v = axes[a].values[pick[a]];
            p.accel[axes[a].method]["enabled"] = true;
            p.accel[axes[a].method][axes[a].param] = v;
            p.values[axes[a].key()] = v;
            p.name += (p.name.empty() ? "" : " ") + axes[a].key() + "=" + v.dump();
        }
        points.push_back(std::move(p));
    }
    return points;
}

std::vector<bool> pareto_front(const std::vector<double>& speed,
                               const std::vector<nlohmann::json>& quality) {
    const size_t n = speed.size();
    std::vector<bool> front(n, true);
    for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < n && front[i]; ++j) {
            const double qi = quality_value(quality[i]), qj = quality_value(quality[j]);
            if (j != i && speed[j] >= speed[i] && qj >= qi && (speed[j] > speed[i] || qj > qi))
                front[i] = false;
        }
    return front;
}

nlohmann::json sweep_summary(const nlohmann::json& eval_result,
                             const std::vector<SweepPoint>& points, const std::string& metric) {
    check_quality_metric(metric);
    const bool emoji = metric.rfind("emoji_", 0) == 0;
    nlohmann::json rows = nlohmann::json::array();
    std::vector<double> speed;
    std::vector<nlohmann::json> quality;
    for (const auto& c : eval_result.at("configs")) {
        const std::string name = c.at("name").get<std::string>();
        nlohmann::json row = {
            {"name", name}, {"speedup", c.at("speedup")}, {"images_per_s", c.at("images_per_s")}};
        if (emoji) {
            const auto p = std::find_if(points.begin(), points.end(),
                                        [&](const SweepPoint& s) { return s.name == name; });
            row["values"] = name == "baseline" || p == points.end() ? nlohmann::json() : p->values;
            row["quality"] = emoji_quality_of(c, metric);
        } else if (name == "baseline") {
            row["values"] = nullptr;
            row["quality"] = metric == "psnr_db" ? nlohmann::json() : nlohmann::json(1.0);
        } else {
            const auto p = std::find_if(points.begin(), points.end(),
                                        [&](const SweepPoint& s) { return s.name == name; });
            row["values"] = p == points.end() ? nlohmann::json() : p->values;
            const auto& m = c.value(metric, nlohmann::json());
            row["quality"] = m.is_object() ? m.value("mean", nlohmann::json()) : nlohmann::json();
            if (metric == "psnr_db" && m.is_object() && m.value("n", 0.0) > 0 &&
                m.value("identical", 0.0) > 0)
                row["identical_images"] = m["identical"];
            if (metric == "token_agreement" && row["quality"].is_null())
                throw std::invalid_argument(
                    "--quality token_agreement: this model family reports no token agreement");
        }
        // The config it ran and every number of its result: the app loads and plots them.
        row["accel"] = c.value("accel", nlohmann::json());
        nlohmann::json metrics = c;
        metrics.erase("name");
        metrics.erase("accel");
        row["metrics"] = std::move(metrics);
        speed.push_back(c.at("speedup").get<double>());
        quality.push_back(row["quality"]);
        rows.push_back(std::move(row));
    }
    const auto front = pareto_front(speed, quality);
    nlohmann::json names = nlohmann::json::array();
    for (size_t i = 0; i < rows.size(); ++i) {
        rows[i]["pareto"] = static_cast<bool>(front[i]);
        if (front[i]) names.push_back(rows[i]["name"]);
    }
    nlohmann::json summary = {
        {"quality_metric", metric}, {"points", rows}, {"pareto_front", names}};
    for (const char* key : {"model", "family"})  // to tell whether the app's model ran it
        if (eval_result.contains(key)) summary[key] = eval_result[key];
    return summary;
}

std::string pareto_svg(const nlohmann::json& summary) {
    const double W = 640, H = 420, left = 70, right = 20, top = 30, bottom = 50;
    const auto& pts = summary.at("points");
    double xmin = 1e300, xmax = -1e300, ymin = 1e300, ymax = -1e300;
    for (const auto& p : pts) {
        const double x = p.at("speedup").get<double>();
        xmin = std::min(xmin, x);
        xmax = std::max(xmax, x);
        if (!p.at("quality").is_null()) {
            ymin = std::min(ymin, p["quality"].get<double>());
            ymax = std::max(ymax, p["quality"].get<double>());
        }
    }
    if (ymin > ymax) ymin = 0, ymax = 1;
    const double yspan = std::max(ymax - ymin, 1e-9), xspan = std::max(xmax - xmin, 1e-9);
    ymax += 0.08 * yspan;  // room on top for the null (identical images) quality
    xmin -= 0.05 * xspan;
    xmax += 0.05 * xspan;
    ymin -= 0.05 * yspan;
    auto X = [&](double x) { return left + (x - xmin) / (xmax - xmin) * (W - left - right); };
    auto Y = [&](const nlohmann::json& q) {
        const double y = q.is_null() ? ymax : q.get<double>();
        return H - bottom - (y - ymin) / (ymax - ymin) * (H - top - bottom);
    };
    const std::string metric = summary.at("quality_metric").get<std::string>();
    std::ostringstream s;
    s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
      << "\" viewBox=\"0 0 " << W << " " << H << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << W / 2 << "\" y=\"18\" text-anchor=\"middle\" font-size=\"13\">Speed vs "
      << xml_escape(metric) << " (Pareto front in blue)</text>\n"
      << "<line x1=\"" << left << "\" y1=\"" << H - bottom << "\" x2=\"" << W - right << "\" y2=\""
      << H - bottom << "\" stroke=\"black\"/>\n"
      << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\""
      << H - bottom << "\" stroke=\"black\"/>\n";
    for (int t = 0; t <= 4; ++t) {  // ticks
        const double x = xmin + (xmax - xmin) * t / 4, y = ymin + (ymax - ymin) * t / 4;
        s << "<text x=\"" << X(x) << "\" y=\"" << H - bottom + 16 << "\" text-anchor=\"middle\">"
          << num(x, 3) << "</text>\n"
          << "<text x=\"" << left - 6 << "\" y=\"" << Y(y) + 4 << "\" text-anchor=\"end\">"
          << num(y, 4) << "</text>\n";
    }
    s << "<text x=\"" << (left + W - right) / 2 << "\" y=\"" << H - 12
      << "\" text-anchor=\"middle\">speedup (images/s over the baseline's)</text>\n"
      << "<text x=\"16\" y=\"" << (top + H - bottom) / 2 << "\" text-anchor=\"middle\" "
      << "transform=\"rotate(-90 16 " << (top + H - bottom) / 2 << ")\">" << xml_escape(metric)
      << " (mean)</text>\n";
    std::vector<std::pair<double, double>> line;
    for (const auto& p : pts)
        if (p.at("pareto").get<bool>())
            line.push_back({X(p["speedup"].get<double>()), Y(p["quality"])});
    std::sort(line.begin(), line.end());
    s << "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"";
    for (const auto& [x, y] : line) s << x << "," << y << " ";
    s << "\"/>\n";
    for (const auto& p : pts) {
        const bool on = p.at("pareto").get<bool>();
        const double x = X(p["speedup"].get<double>()), y = Y(p["quality"]);
        const std::string name = xml_escape(p.at("name").get<std::string>());
        s << "<circle cx=\"" << x << "\" cy=\"" << y << "\" r=\"4\" fill=\""
          << (on ? "#1f77b4" : "#999999") << "\"><title>" << name << ": speedup "
          << num(p["speedup"].get<double>()) << ", " << xml_escape(metric) << " "
          << (p["quality"].is_null() ? std::string("identical") : num(p["quality"].get<double>()))
          << "</title></circle>\n";
        if (on)
            s << "<text x=\"" << x + 6 << "\" y=\"" << y - 6 << "\" font-size=\"9\">" << name
              << "</text>\n";
    }
    s << "</svg>\n";
    return s.str();
}

nlohmann::json run_sweep(EvalManifest m, Runner& runner, const SweepRequest& request,
                         const EvalJobOptions& options) {
    if (m.configs.size() != 1)
        throw std::invalid_argument(
            "sweep: the manifest names " + std::to_string(m.configs.size()) +
            " configs; a sweep starts from one (its base, e.g. {\"base\": {}})");
    check_sweep_axes(request.axes, runner.methods(), request.grid);
    check_quality_metric(request.metric);
    if (request.metric.rfind("emoji_", 0) == 0 && !m.metrics.emoji_enabled())
        throw std::invalid_argument("--quality " + request.metric +
                                    ": the manifest's metrics name no emoji network (add "
                                    "\"metrics\": {\"emoji\": true})");
    const auto plans = eval_plans(m, runner);  // names a bad base config
    const nlohmann::json base = plans.plans[1]->to_json();
    const auto points = sweep_points(base, request.axes, request.grid);
    m.configs.clear();
    for (const auto& p : points) m.configs.push_back({p.name, p.accel});
    const auto result = run_eval_job(m, runner, options);
    if (!result.root) return nullptr;
    nlohmann::json summary = sweep_summary(result.result, points, request.metric);
    summary["result"] = result.result_path;
    const std::filesystem::path dir = m.output_dir;
    write_file_atomic((dir / "sweep.json").string(), summary.dump(2) + "\n");
    write_file_atomic((dir / "pareto.svg").string(), pareto_svg(summary));
    return summary;
}

}  // namespace varscope
