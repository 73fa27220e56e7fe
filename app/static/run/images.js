// The run page's Images section: per TensorBoard tag (add_image, add_figure), the newest image
// and a step slider to go back through the tag's earlier steps. Asked for again on the run's
// stream events while it is live; a slider left at the newest step follows new images, one
// moved back stays on its step. Tags are hostile: set as text, never as HTML.
import {call} from "../lib/api.js";
import {api} from "../lib/urls.js";

const EVERY_MS = 3000;

export const mountImages = (stream) => {
  const section = document.getElementById("images");
  if (!section) return;
  const runId = section.dataset.runId;
  const list = /** @type {HTMLElement} */ (document.getElementById("images-list"));
  const empty = /** @type {HTMLElement} */ (document.getElementById("images-empty"));
  const views = new Map();  // tag -> {figure, img, slider, output, images, follow}

  const show = (view) => {
    const image = view.images[Number(view.slider.value)];
    if (!image) return;
    const src = api.runImage(runId, image.id);
    if (view.img.getAttribute("src") !== src) view.img.src = src;
    view.img.dataset.step = String(image.step);
    view.img.dataset.imageId = String(image.id);
    view.img.alt = `${view.tag} at step ${image.step}`;
    view.img.width = image.width;
    view.img.height = image.height;
    view.img.classList.toggle("tb-small", image.width < 256);  // scaled up: keep pixels sharp
    view.output.textContent = `step ${image.step}`;
  };

  const create = (tag) => {
    const figure = document.createElement("figure");
    figure.className = "tb-image";
    figure.dataset.tag = tag;
    const caption = document.createElement("figcaption");
    caption.textContent = tag;
    const img = document.createElement("img");
    img.decoding = "async";
    const label = document.createElement("label");
    label.className = "tb-image-step";
    const slider = document.createElement("input");
    slider.type = "range";
    slider.min = "0";
    slider.step = "1";
    slider.setAttribute("aria-label", `step of ${tag}`);
    const output = document.createElement("output");
    label.append(slider, " ", output);
    figure.append(caption, img, label);
    const view = {tag, figure, img, slider, output, images: [], follow: true};
    slider.addEventListener("input", () => {
      view.follow = Number(slider.value) === view.images.length - 1;
      show(view);
    });
    return view;
  };

  const render = (tags) => {
    const names = Object.keys(tags).sort();
    for (const tag of names) {
      let view = views.get(tag);
      if (!view) views.set(tag, view = create(tag));
      const shown = view.images[Number(view.slider.value)];
      view.images = tags[tag];
      const last = view.images.length - 1;
      let index = last;
      if (!view.follow && shown) {
        const same = view.images.findIndex((i) => i.step >= shown.step);
        index = same < 0 ? last : same;
      }
      view.slider.max = String(Math.max(last, 0));
      view.slider.value = String(index);
      view.slider.disabled = last < 1;
      show(view);
    }
    list.replaceChildren(...names.map((tag) => views.get(tag).figure));
    empty.hidden = names.length > 0;
  };

  const load = async () => {
    const res = await call("GET", api.runImages(runId));
    if (res.ok && res.body && typeof res.body.tags === "object") render(res.body.tags);
  };
  load();
  stream.refreshOn(load, EVERY_MS);
};
